-- Named queries of the control database. Entity first, then verb.

-- name: tenant_insert
INSERT INTO tenants (tenant_id, name) VALUES ($1, $2)
ON CONFLICT (name) DO NOTHING
RETURNING tenant_id, name, created_at;

-- name: app_insert
INSERT INTO apps (app_id, tenant_id, name) VALUES ($1, $2, $3)
RETURNING app_id, tenant_id, name, created_at;

-- name: app_get_by_name
SELECT app_id, tenant_id, name FROM apps WHERE tenant_id = $1 AND name = $2;

-- name: api_key_insert
INSERT INTO api_keys (key_id, key_hash, tenant_id, app_id) VALUES ($1, $2, $3, $4)
RETURNING key_id, created_at;

-- name: api_key_get_by_hash
SELECT k.key_id, k.tenant_id, k.app_id, a.name AS app_name
FROM api_keys k JOIN apps a ON a.app_id = k.app_id
WHERE k.key_hash = $1 AND k.revoked_at IS NULL;

-- name: deployment_insert
INSERT INTO deployments (app_id, digest, module, handlers, bundle_uri)
VALUES ($1, $2, $3, $4::jsonb, $5)
ON CONFLICT (app_id, digest) DO NOTHING
RETURNING deployment_id, app_id, digest, module, handlers::text AS handlers, bundle_uri, created_at;

-- name: deployment_get_by_digest
SELECT deployment_id, app_id, digest, module, handlers::text AS handlers, bundle_uri, created_at
FROM deployments WHERE app_id = $1 AND digest = $2;

-- name: deployment_get_bundle_uri
SELECT bundle_uri FROM deployments WHERE digest = $1 LIMIT 1;

-- name: active_deployment_set
INSERT INTO active_deployments (app_id, deployment_id) VALUES ($1, $2)
ON CONFLICT (app_id) DO UPDATE
  SET deployment_id = EXCLUDED.deployment_id, activated_at = clock_timestamp()
  WHERE active_deployments.deployment_id IS DISTINCT FROM EXCLUDED.deployment_id
RETURNING app_id;

-- name: active_deployment_get
SELECT d.deployment_id, d.app_id, a.tenant_id, a.name AS app_name, d.digest, d.module,
       d.handlers::text AS handlers, d.bundle_uri, d.created_at
FROM active_deployments ad
JOIN deployments d ON d.deployment_id = ad.deployment_id
JOIN apps a ON a.app_id = ad.app_id
WHERE ad.app_id = $1;
