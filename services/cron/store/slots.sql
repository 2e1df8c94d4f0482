-- Named queries on schedule_slots. Every state change is a compare-and-set
-- on (schedule_id, slot, state); zero rows means someone else moved it.

-- name: slot_insert
-- The UNIQUE (schedule_id, slot) is what makes a double firing impossible.
INSERT INTO schedule_slots (schedule_id, slot, kind, state)
VALUES ($1, $2, $3, 'PENDING')
ON CONFLICT (schedule_id, slot) DO NOTHING
RETURNING slot;

-- name: slot_get
SELECT * FROM schedule_slots WHERE schedule_id = $1 AND slot = $2;

-- name: slot_list_open
SELECT * FROM schedule_slots
WHERE schedule_id = $1 AND state IN ('PENDING', 'BUFFERED', 'SENDING')
ORDER BY slot
LIMIT $2;

-- name: slot_list_recent
SELECT * FROM schedule_slots WHERE schedule_id = $1 ORDER BY slot DESC LIMIT $2;

-- name: slot_due_schedules
-- Schedules with an open slot, the one to act on soonest first, each with
-- whether that is now (decide, re-check a buffer, (re)send): the due ones
-- come first, and an empty answer means no slot is open at all.
SELECT schedule_id, min(next_attempt_at) <= clock_timestamp() AS due
  FROM schedule_slots
 WHERE state IN ('PENDING', 'BUFFERED', 'SENDING')
 GROUP BY schedule_id
 ORDER BY min(next_attempt_at)
 LIMIT $1;

-- name: slot_decision_guards
-- Read under the schedule lock: an earlier slot still undecided or unsent
-- must go first (slots fire in order), and buffer_one keeps one buffered slot.
SELECT
  EXISTS (SELECT 1 FROM schedule_slots
          WHERE schedule_id = $1 AND slot < $2 AND state IN ('PENDING', 'SENDING')) AS earlier_open,
  EXISTS (SELECT 1 FROM schedule_slots
          WHERE schedule_id = $1 AND slot <> $2 AND state = 'BUFFERED') AS other_buffered;

-- name: slot_decide
-- transitions: PENDING -> SENDING | BUFFERED | SKIPPED; BUFFERED -> SENDING | SKIPPED
UPDATE schedule_slots
SET state = $4, reason = $5, cancel_task_id = $6, attempts = 0,
    finished_at = CASE WHEN $4 = 'SKIPPED' THEN clock_timestamp() END,
    next_attempt_at = clock_timestamp() + make_interval(secs => $7)
WHERE schedule_id = $1 AND slot = $2 AND state = $3
  AND (($3 = 'PENDING' AND $4 IN ('SENDING', 'BUFFERED', 'SKIPPED'))
       OR ($3 = 'BUFFERED' AND $4 IN ('SENDING', 'SKIPPED')))
RETURNING state;

-- name: slot_check_later
-- A buffered slot whose previous task still runs: look again later.
UPDATE schedule_slots SET next_attempt_at = clock_timestamp() + make_interval(secs => $3)
WHERE schedule_id = $1 AND slot = $2 AND state = 'BUFFERED'
RETURNING slot;

-- name: slot_mark_fired
-- transitions: SENDING -> FIRED
UPDATE schedule_slots
SET state = 'FIRED', task_id = $3, attempts = attempts + 1, reason = NULL, finished_at = clock_timestamp()
WHERE schedule_id = $1 AND slot = $2 AND state = 'SENDING'
RETURNING slot;

-- name: slot_mark_failed
-- transitions: SENDING -> FAILED
UPDATE schedule_slots
SET state = 'FAILED', reason = $3, attempts = attempts + 1, finished_at = clock_timestamp()
WHERE schedule_id = $1 AND slot = $2 AND state = 'SENDING'
RETURNING slot;

-- name: slot_retry_later
-- A transient failure (gateway or history unreachable): same state, try later.
UPDATE schedule_slots
SET attempts = attempts + 1, reason = $4,
    next_attempt_at = clock_timestamp() + make_interval(secs => $5)
WHERE schedule_id = $1 AND slot = $2 AND state = $3
RETURNING slot;

-- name: slot_skip_on_pause
-- transitions: PENDING | BUFFERED -> SKIPPED (cron slots only: a trigger is an explicit request)
UPDATE schedule_slots
SET state = 'SKIPPED', reason = 'schedule paused', finished_at = clock_timestamp()
WHERE schedule_id = $1 AND state IN ('PENDING', 'BUFFERED') AND kind <> 'TRIGGER';

-- name: slot_delete_for_schedule
DELETE FROM schedule_slots WHERE schedule_id = $1;

-- name: slot_prune
-- Finished slots past retention; the gateway's idempotency window (24 h) is
-- shorter, so nothing older can be deduplicated anyway.
DELETE FROM schedule_slots
WHERE ctid IN (SELECT ctid FROM schedule_slots
               WHERE finished_at IS NOT NULL AND finished_at < clock_timestamp() - make_interval(secs => $1)
               LIMIT $2);
