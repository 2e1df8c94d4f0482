-- Control database of the gateway (its only writer): tenants, their apps,
-- API keys (hashed only), deployments and the active deployment per app.

CREATE TABLE tenants (
  tenant_id   text PRIMARY KEY,
  name        text NOT NULL UNIQUE CHECK (name ~ '^[a-z][a-z0-9-]{0,63}$'),
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE apps (
  app_id      text PRIMARY KEY,
  tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
  name        text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  UNIQUE (tenant_id, name)
);

-- key_hash is the hex sha256 of the whole key; the key itself is never stored.
CREATE TABLE api_keys (
  key_id      text PRIMARY KEY,
  key_hash    text NOT NULL UNIQUE CHECK (key_hash ~ '^[0-9a-f]{64}$'),
  tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
  app_id      text NOT NULL REFERENCES apps (app_id),
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  revoked_at  timestamptz
);

-- A deployment is immutable: its identity is the bundle digest.
CREATE TABLE deployments (
  deployment_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  app_id        text NOT NULL REFERENCES apps (app_id),
  digest        text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
  module        text NOT NULL,
  handlers      jsonb NOT NULL CHECK (jsonb_typeof(handlers) = 'array' AND jsonb_array_length(handlers) > 0),
  bundle_uri    text NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  UNIQUE (app_id, digest)
);

CREATE INDEX deployments_digest_idx ON deployments (digest);

-- The version tasks of the app run on; one row per app that has deployed.
CREATE TABLE active_deployments (
  app_id        text PRIMARY KEY REFERENCES apps (app_id),
  deployment_id bigint NOT NULL REFERENCES deployments (deployment_id),
  activated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
