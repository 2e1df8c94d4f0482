-- Named queries on schedules. Entity first, then verb. Only the database
-- clock (clock_timestamp()) decides what is due.

-- name: clock_read
SELECT clock_timestamp() AS now;

-- name: schedule_insert
-- $12: the clock reading the first occurrence ($9) was computed from (NULL: now).
INSERT INTO schedules (schedule_id, tenant_id, app_id, cron, timezone, task_template, overlap_policy,
                       catchup_window_ms, state, next_fire_time, request_id, fingerprint, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, 'ACTIVE', $9, $10, $11,
        COALESCE($12::timestamptz, clock_timestamp()), COALESCE($12::timestamptz, clock_timestamp()))
ON CONFLICT (tenant_id, app_id, request_id) WHERE request_id IS NOT NULL DO NOTHING
RETURNING *;

-- name: schedule_get
SELECT * FROM schedules WHERE schedule_id = $1 AND tenant_id = $2 AND app_id = $3;

-- name: schedule_get_by_request
SELECT * FROM schedules WHERE tenant_id = $1 AND app_id = $2 AND request_id = $3;

-- name: schedule_get_any
SELECT * FROM schedules WHERE schedule_id = $1;

-- name: schedule_lock
-- Every transaction that changes a schedule or its slots locks the schedule
-- row first, so they serialise per schedule and cannot deadlock.
SELECT * FROM schedules WHERE schedule_id = $1 FOR UPDATE;

-- name: schedule_lock_owned
SELECT * FROM schedules WHERE schedule_id = $1 AND tenant_id = $2 AND app_id = $3 FOR UPDATE;

-- name: schedule_list
SELECT * FROM schedules
WHERE tenant_id = $1 AND app_id = $2
  AND ($3::timestamptz IS NULL OR (created_at, schedule_id) > ($3, $4::uuid))
ORDER BY created_at, schedule_id
LIMIT $5;

-- name: schedule_claim_due
-- Due active schedules with no undecided or unsent slot (a schedule whose
-- last slot cannot be delivered stops materialising new ones; when delivery
-- works again, the catch-up rule decides what the gap fires). SKIP LOCKED:
-- two cron processes never wait on, nor claim, the same schedule.
SELECT * FROM schedules s
WHERE s.state = 'ACTIVE' AND s.next_fire_time <= $1
  AND NOT EXISTS (SELECT 1 FROM schedule_slots sl
                  WHERE sl.schedule_id = s.schedule_id AND sl.state IN ('PENDING', 'SENDING'))
ORDER BY s.next_fire_time
LIMIT $2
FOR UPDATE OF s SKIP LOCKED;

-- name: schedule_next_due
-- Seconds until schedule_claim_due would find a schedule (its predicate,
-- without the locks; negative when one is due now), NULL when no schedule
-- could fire: read outside any transaction on every look, so an idle cron
-- process opens none, and the fire loop sleeps until then.
SELECT extract(epoch FROM (min(s.next_fire_time) - clock_timestamp()))::float8 AS due_in_s
  FROM schedules s
 WHERE s.state = 'ACTIVE'
   AND NOT EXISTS (SELECT 1 FROM schedule_slots sl
                   WHERE sl.schedule_id = s.schedule_id AND sl.state IN ('PENDING', 'SENDING'));

-- name: schedule_advance
-- Compare-and-set on the occurrence that was due. A NULL next (the
-- expression has no further occurrence) pauses the schedule.
UPDATE schedules
SET next_fire_time = $3, state = CASE WHEN $3::timestamptz IS NULL THEN 'PAUSED' ELSE state END,
    updated_at = clock_timestamp()
WHERE schedule_id = $1 AND state = 'ACTIVE' AND next_fire_time = $2
RETURNING schedule_id;

-- name: schedule_record_fire
-- The last slot fired and its task, read by the next slot's overlap check.
-- Slots fire in order, so the guard only protects against clock steps.
UPDATE schedules
SET last_fire_time = $2, last_task_id = $3, updated_at = clock_timestamp()
WHERE schedule_id = $1 AND (last_fire_time IS NULL OR last_fire_time <= $2)
RETURNING schedule_id;

-- name: schedule_pause
UPDATE schedules SET state = 'PAUSED', next_fire_time = NULL, updated_at = clock_timestamp()
WHERE schedule_id = $1 AND state = 'ACTIVE'
RETURNING *;

-- name: schedule_resume
UPDATE schedules SET state = 'ACTIVE', next_fire_time = $2, updated_at = clock_timestamp()
WHERE schedule_id = $1 AND state = 'PAUSED'
RETURNING *;

-- name: schedule_delete
DELETE FROM schedules WHERE schedule_id = $1 AND tenant_id = $2 AND app_id = $3
RETURNING schedule_id;
