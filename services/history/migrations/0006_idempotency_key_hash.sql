-- Less WAL per task: idempotency keys are unique by a 16-byte digest.
--
-- Every SDK enqueue carries a key, and its primary key entry (tenant_id,
-- app_id, key: long text, at a random place in the index, so pages split
-- often) was a large part of an enqueue's WAL. The unique index is now on
-- the first 128 bits of sha256 over the three (length-prefixed, so no two
-- triples share an input): 16-byte entries, far less WAL. The columns
-- stay in the row, and every read compares them too, so a digest collision
-- (2^-128) can only refuse a key, never hand one tenant's task to another.

CREATE FUNCTION idempotency_key_hash(tenant_id text, app_id text, key text) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN encode(substr(sha256(convert_to(length(tenant_id)::text || ':' || tenant_id || length(app_id)::text
                                           || ':' || app_id || key, 'UTF8')), 1, 16), 'hex')::uuid;

CREATE UNIQUE INDEX idempotency_keys_hash ON idempotency_keys (idempotency_key_hash(tenant_id, app_id, key));
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
