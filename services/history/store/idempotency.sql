-- Named queries on idempotency_keys. Uniqueness comes from the unique index
-- on idempotency_key_hash(tenant_id, app_id, key) (migration 0006), never
-- from a lock taken in Python; every read also compares the three columns.

-- name: idempotency_key_claim_batch
-- Claim keys for new tasks (callers pass them sorted, so concurrent batches
-- lock in one order). A key past expires_at is taken over by the new task;
-- a live key is left alone, but ON CONFLICT DO UPDATE still locks it, so
-- the follow-up read sees the committed owner. Returns the keys claimed.
INSERT INTO idempotency_keys (tenant_id, app_id, key, task_id, fingerprint, created_at, expires_at)
SELECT i.tenant_id, i.app_id, i.key, i.task_id, i.fingerprint, clock_timestamp(),
       clock_timestamp() + make_interval(secs => $6::float8)
  FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::text[])
       AS i(tenant_id, app_id, key, task_id, fingerprint)
ON CONFLICT ((idempotency_key_hash(tenant_id, app_id, key))) DO UPDATE
   SET tenant_id = EXCLUDED.tenant_id, app_id = EXCLUDED.app_id, key = EXCLUDED.key,
       task_id = EXCLUDED.task_id, fingerprint = EXCLUDED.fingerprint,
       created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
 WHERE idempotency_keys.expires_at <= clock_timestamp()
RETURNING tenant_id, app_id, key

-- name: idempotency_key_get_batch
-- The current owners of these keys.
SELECT k.tenant_id, k.app_id, k.key, k.task_id, k.fingerprint
  FROM unnest($1::text[], $2::text[], $3::text[]) AS i(tenant_id, app_id, key)
  JOIN idempotency_keys k
    ON idempotency_key_hash(k.tenant_id, k.app_id, k.key) = idempotency_key_hash(i.tenant_id, i.app_id, i.key)
   AND k.tenant_id = i.tenant_id AND k.app_id = i.app_id AND k.key = i.key
