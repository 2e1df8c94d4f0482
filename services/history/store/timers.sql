-- Named queries on timers: one mechanism for delays, retry backoff, lease
-- expiry and timeouts. Due means fire_at <= clock_timestamp() (shard clock).

-- name: timer_claim_due
-- Claim due timers oldest first and delete them, locking each timer and its
-- task and skipping any another firer or writer holds (never waiting, so no
-- deadlock with writers that lock the task first). Task columns come from
-- the locked row version, so decisions see the latest committed state.
WITH due AS (
    SELECT m.task_id, m.kind, m.fire_at, m.lease_epoch AS timer_epoch,
           t.state, t.lease_epoch, t.attempt, t.max_attempts, t.retry_policy, t.retry_rules, t.non_retryable,
           t.cancel_requested, t.cancel_reason,
           t.run_at <= clock_timestamp() AS due_now,
           COALESCE(t.lease_expires_at <= clock_timestamp(), false) AS lease_expired,
           COALESCE(t.attempt_deadline <= clock_timestamp(), false) AS deadline_passed,
           COALESCE(t.kill_at <= clock_timestamp(), false) AS kill_passed
      FROM timers m JOIN tasks t ON t.task_id = m.task_id
     WHERE m.fire_at <= clock_timestamp()
     ORDER BY m.fire_at
     LIMIT $1
       FOR UPDATE OF m SKIP LOCKED
       FOR NO KEY UPDATE OF t SKIP LOCKED
),
gone AS (
    DELETE FROM timers m USING due
     WHERE m.task_id = due.task_id AND m.kind = due.kind
    RETURNING m.task_id, m.kind
)
SELECT due.* FROM due JOIN gone ON gone.task_id = due.task_id AND gone.kind = due.kind
 ORDER BY due.fire_at

-- name: timer_claim_due_unlocked
-- TEST-ONLY (guards.timer_skip_locked = false): reads due timers without
-- locking or deleting them (the caller deletes the fired instances after
-- applying them), so two firers can fire one timer twice.
SELECT m.task_id, m.kind, m.fire_at, m.lease_epoch AS timer_epoch,
       t.state, t.lease_epoch, t.attempt, t.max_attempts, t.retry_policy, t.retry_rules, t.non_retryable,
       t.cancel_requested, t.cancel_reason,
       t.run_at <= clock_timestamp() AS due_now,
       COALESCE(t.lease_expires_at <= clock_timestamp(), false) AS lease_expired,
       COALESCE(t.attempt_deadline <= clock_timestamp(), false) AS deadline_passed,
       COALESCE(t.kill_at <= clock_timestamp(), false) AS kill_passed
  FROM timers m JOIN tasks t ON t.task_id = m.task_id
 WHERE m.fire_at <= clock_timestamp()
 ORDER BY m.fire_at
 LIMIT $1

-- name: timer_delete_batch
-- Delete these timer instances, each only if it still fires at the same
-- time (a timer rescheduled meanwhile is a new instance and stays).
DELETE FROM timers m
 USING unnest($1::uuid[], $2::text[], $3::timestamptz[]) AS i(task_id, kind, fire_at)
 WHERE m.task_id = i.task_id AND m.kind = i.kind AND m.fire_at = i.fire_at

-- name: timer_lease_reschedule_batch
-- (Re)set the lease timer of leases still held to their next event: lease
-- expiry, the attempt deadline (unless a cancel is already running), or the
-- kill time after a cancel.
INSERT INTO timers (task_id, kind, fire_at, lease_epoch)
SELECT t.task_id, 'lease',
       LEAST(t.lease_expires_at, CASE WHEN NOT t.cancel_requested THEN t.attempt_deadline END, t.kill_at),
       t.lease_epoch
  FROM tasks t JOIN unnest($1::uuid[], $2::bigint[]) AS i(task_id, lease_epoch)
    ON t.task_id = i.task_id AND t.lease_epoch = i.lease_epoch
 WHERE t.state = 'LEASED'
ON CONFLICT (task_id, kind) DO UPDATE SET fire_at = EXCLUDED.fire_at, lease_epoch = EXCLUDED.lease_epoch

-- name: timer_next_in
-- Seconds until the earliest pending timer (negative when overdue), or NULL.
SELECT extract(epoch FROM (min(fire_at) - clock_timestamp()))::float8 AS next_in_s FROM timers
