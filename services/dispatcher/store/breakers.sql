-- Named queries on the breakers table (ratchet_dispatch). Entity first, then
-- verb. Only the database clock (clock_timestamp()) is `now` for breakers:
-- every transaction reads it once and decides with it.

-- name: clock_read
SELECT clock_timestamp() AS now;

-- name: breaker_create
-- A CLOSED row for a type's first crash; a row that exists is left alone.
INSERT INTO breakers (tenant_id, app_id, task_type) VALUES ($1, $2, $3)
ON CONFLICT (tenant_id, app_id, task_type) DO NOTHING;

-- name: breaker_lock
-- Every transaction that changes a breaker locks its row first, so changes to
-- one breaker serialise (across dispatcher processes too).
SELECT * FROM breakers WHERE tenant_id = $1 AND app_id = $2 AND task_type = $3 FOR UPDATE;

-- name: breaker_get
SELECT * FROM breakers WHERE tenant_id = $1 AND app_id = $2 AND task_type = $3;

-- name: breaker_update
-- Compare-and-set on the state and version the caller decided from; zero rows
-- means someone else changed the breaker first (a typed error).
UPDATE breakers
SET state = $6, crash_times = $7, last_crashes = $8::jsonb, reason = $9, opened_at = $10, probe_at = $11,
    probe_owner = $12, probe_task_id = $13, probe_leased_at = $14,
    version = version + 1, updated_at = clock_timestamp()
WHERE tenant_id = $1 AND app_id = $2 AND task_type = $3 AND state = $4 AND version = $5
RETURNING *;

-- name: breaker_list_not_closed
-- The refresh loop's scan (partial index breakers_not_closed).
SELECT * FROM breakers WHERE state <> 'CLOSED' ORDER BY tenant_id, app_id, task_type;

-- name: breaker_list_app
-- ListBreakers: the app's breakers that are not CLOSED or crashed within the
-- window ($3 seconds). crash_times[1] is the newest crash.
SELECT * FROM breakers
WHERE tenant_id = $1 AND app_id = $2
  AND (state <> 'CLOSED' OR crash_times[1] > clock_timestamp() - make_interval(secs => $3))
ORDER BY task_type;
