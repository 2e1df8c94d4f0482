-- Named queries on timers: one mechanism for delays, retry backoff, lease
-- expiry and timeouts. Due means fire_at <= clock_timestamp() (shard clock).
-- Since migration 0005 the `lease` timer of a leased task is its row's
-- lease_check_at (index tasks_lease_check), set by the lease statement and
-- cleared by the transition that ends the lease; the other kinds are rows of
-- timer_queue. The view `timers` shows both as one list.

-- name: timer_claim_due
-- Claim due timers oldest first: delete the due timer_queue rows, locking
-- each row and its task, and lock the leased tasks whose lease check is due,
-- skipping any row another firer or writer holds (never waiting, so no
-- deadlock with writers that lock the task first). A claimed lease check is
-- not deleted: firing it either moves the task out of LEASED (which clears
-- it) or reschedules it, in the same transaction. Task columns come from the
-- locked row version, so decisions see the latest committed state.
WITH due AS (
    SELECT m.task_id, m.kind, m.fire_at, m.lease_epoch AS timer_epoch,
           t.state, t.lease_epoch, t.attempt, t.max_attempts, t.retry_policy, t.retry_rules, t.non_retryable,
           t.cancel_requested, t.cancel_reason,
           t.run_at <= clock_timestamp() AS due_now,
           COALESCE(t.lease_expires_at <= clock_timestamp(), false) AS lease_expired,
           COALESCE(t.attempt_deadline <= clock_timestamp(), false) AS deadline_passed,
           COALESCE(t.kill_at <= clock_timestamp(), false) AS kill_passed
      FROM timer_queue m JOIN tasks t ON t.task_id = m.task_id
     WHERE m.fire_at <= clock_timestamp()
     ORDER BY m.fire_at
     LIMIT $1
       FOR UPDATE OF m SKIP LOCKED
       FOR NO KEY UPDATE OF t SKIP LOCKED
),
gone AS (
    DELETE FROM timer_queue m USING due
     WHERE m.task_id = due.task_id AND m.kind = due.kind
    RETURNING m.task_id, m.kind
),
leases AS (
    SELECT t.task_id, 'lease'::text AS kind, t.lease_check_at AS fire_at, t.lease_epoch AS timer_epoch,
           t.state, t.lease_epoch, t.attempt, t.max_attempts, t.retry_policy, t.retry_rules, t.non_retryable,
           t.cancel_requested, t.cancel_reason,
           t.run_at <= clock_timestamp() AS due_now,
           COALESCE(t.lease_expires_at <= clock_timestamp(), false) AS lease_expired,
           COALESCE(t.attempt_deadline <= clock_timestamp(), false) AS deadline_passed,
           COALESCE(t.kill_at <= clock_timestamp(), false) AS kill_passed
      FROM tasks t
     WHERE t.state = 'LEASED' AND t.lease_check_at <= clock_timestamp()
     ORDER BY t.lease_check_at
     LIMIT $1
       FOR NO KEY UPDATE OF t SKIP LOCKED
)
SELECT x.* FROM (
    SELECT due.* FROM due JOIN gone ON gone.task_id = due.task_id AND gone.kind = due.kind
    UNION ALL
    SELECT leases.* FROM leases
) x
 ORDER BY x.fire_at

-- name: timer_lease_reschedule_batch
-- Move the lease check of leases still held to their next event: lease
-- expiry, the attempt deadline (unless a cancel is already running), or the
-- kill time after a cancel.
UPDATE tasks t
   SET lease_check_at = LEAST(t.lease_expires_at, CASE WHEN NOT t.cancel_requested THEN t.attempt_deadline END,
                              t.kill_at)
  FROM unnest($1::uuid[], $2::bigint[]) AS i(task_id, lease_epoch)
 WHERE t.task_id = i.task_id AND t.lease_epoch = i.lease_epoch AND t.state = 'LEASED'

-- name: timer_next_in
-- Seconds until the earliest pending timer or lease check (negative when
-- overdue), or NULL.
SELECT extract(epoch FROM (LEAST((SELECT min(fire_at) FROM timer_queue),
                                 (SELECT min(lease_check_at) FROM tasks WHERE state = 'LEASED'))
                           - clock_timestamp()))::float8 AS next_in_s
