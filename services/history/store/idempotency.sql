-- Named queries on idempotency_keys. Uniqueness comes from the unique index
-- on idempotency_key_hash(tenant_id, app_id, key) (migration 0006), never
-- from a lock taken in Python; every read also compares the three columns.

-- name: idempotency_key_expire_batch
-- Delete these keys where their window has passed, so the next create takes
-- them over (task_create found them expired); a live key is never touched,
-- and a key another writer took over meanwhile is live again.
DELETE FROM idempotency_keys k
 USING unnest($1::text[], $2::text[], $3::text[]) AS i(tenant_id, app_id, key)
 WHERE idempotency_key_hash(k.tenant_id, k.app_id, k.key) = idempotency_key_hash(i.tenant_id, i.app_id, i.key)
   AND k.tenant_id = i.tenant_id AND k.app_id = i.app_id AND k.key = i.key
   AND k.expires_at <= clock_timestamp()
