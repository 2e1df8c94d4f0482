-- Named queries of workflow runs (docs/design/workflows-protocol.md): the
-- step log (workflow_steps), the open waits (workflow_waits), a run's inbox
-- (workflow_inbox), and the run's own edges LEASED -> WAITING -> ENQUEUED.
-- A run is a task: the other edges of a run (cancel, expiry, an
-- activation's failure) are task_transition_apply's. Every change to a run's
-- log is made under a lock on its task row: a step op holds it FOR SHARE
-- under the lease's fence (workflow_lease_share), an event or a suspension
-- FOR NO KEY UPDATE (task_lock, task_complete_lock, workflow_tasks_lock), so
-- an event and the step or suspension it races are serialised, and the
-- statement after the lock takes a snapshot that sees what the other committed.

-- name: workflow_lease_share
-- The fence of a step op: the run's task row, locked FOR SHARE (steps of
-- one run do not block one another; a completion, a heartbeat's update, an
-- event or a timer waits), only while LEASED under this lease epoch. No row:
-- the lease is not current and the op writes nothing. cancelled: the run
-- holds a cancel for its compensations (workflow_cancels; one index probe).
SELECT t.tenant_id, EXISTS (SELECT 1 FROM workflow_cancels c WHERE c.workflow_id = t.task_id) AS cancelled
  FROM tasks t
 WHERE t.task_id = $1::uuid AND t.state = 'LEASED' AND t.lease_epoch = $2::bigint
   FOR SHARE OF t

-- name: workflow_step_lock
-- The log's row at a position, locked (a resent op of the same run waits
-- for the first), with how long until its wake_at on the shard clock.
SELECT s.position, s.name, s.kind, s.state, s.lease_epoch, s.attempt, s.result, s.error_class,
       s.error_message, s.error_stack, s.fatal, s.wake_at, s.started_at, s.finished_at,
       extract(epoch FROM (s.wake_at - clock_timestamp()))::float8 AS wake_in_s
  FROM workflow_steps s
 WHERE s.workflow_id = $1::uuid AND s.position = $2::int
   FOR UPDATE

-- name: workflow_step_exists
-- Whether the log holds a row at a position (a BEGIN past the log's end is
-- refused: positions are dense, so the row before must exist).
SELECT EXISTS (SELECT 1 FROM workflow_steps WHERE workflow_id = $1::uuid AND position = $2::int)

-- name: workflow_step_insert
-- A new row of the log: $5 its state (RUNNING: a claim under lease epoch $6,
-- or a sleep or wait not over; COMPLETED: a version marker, a sleep of no
-- time, a wait an inbox event satisfied), $7 its result, $8 the seconds to
-- its wake_at (a sleep's end, a wait's timeout; NULL: none). Nothing when a
-- concurrent op inserted the position first (the caller reads that row).
WITH now AS (SELECT clock_timestamp() AS t)
INSERT INTO workflow_steps (workflow_id, position, name, kind, state, lease_epoch, attempt, result,
                            wake_at, started_at, finished_at)
SELECT $1::uuid, $2::int, $3::text, $4::text, $5::text, $6::bigint, 1, $7::bytea,
       now.t + make_interval(secs => $8::float8), now.t, CASE WHEN $5::text <> 'RUNNING' THEN now.t END
  FROM now
    ON CONFLICT (workflow_id, position) DO NOTHING
RETURNING position, name, kind, state, lease_epoch, attempt, result, error_class, error_message, error_stack,
          fatal, wake_at, started_at, finished_at, $8::float8 AS wake_in_s

-- name: workflow_step_reclaim
-- A new claim of a STEP row for lease epoch $3: its earlier claim was left
-- by an older activation (RUNNING, a lower epoch: the step may have run) or
-- it failed without being fatal. attempt + 1. Returns the new attempt.
UPDATE workflow_steps s
   SET state = 'RUNNING', attempt = s.attempt + 1, lease_epoch = $3::bigint, result = NULL,
       error_class = NULL, error_message = NULL, error_stack = NULL, fatal = false,
       started_at = clock_timestamp(), finished_at = NULL
 WHERE s.workflow_id = $1::uuid AND s.position = $2::int AND s.kind IN ('STEP', 'COMPENSATE')
   AND ((s.state = 'RUNNING' AND s.lease_epoch < $3::bigint) OR (s.state = 'FAILED' AND NOT s.fatal))
RETURNING s.attempt

-- name: workflow_step_commit
-- COMMIT of a claimed STEP (or COMPENSATE: kind $11) named $10: a compare-and-set on (position,
-- RUNNING, lease epoch $3) to COMPLETED with result $5, or FAILED with the
-- error ($6..$8, $9 fatal). Returns the attempt; nothing when the claim is
-- not this lease's (or the row is another step).
UPDATE workflow_steps s
   SET state = $4::text, result = $5::bytea, error_class = $6::text, error_message = $7::text,
       error_stack = $8::text, fatal = $9::bool, finished_at = clock_timestamp()
 WHERE s.workflow_id = $1::uuid AND s.position = $2::int AND s.kind = $11::text AND s.state = 'RUNNING'
   AND s.lease_epoch = $3::bigint AND s.name = $10::text
RETURNING s.attempt

-- name: workflow_step_close
-- End a RUNNING sleep or wait: COMPLETED ($3) with result $4 (the sleep's
-- end, the event's data), or FAILED with error $5, $6 (a wait's timeout,
-- fatal); its open wait goes with it. Returns how many rows it ended (0 or 1).
WITH now AS (SELECT clock_timestamp() AS t),
s AS (
    UPDATE workflow_steps s
       SET state = $3::text, result = $4::bytea, error_class = $5::text, error_message = $6::text,
           fatal = $5::text IS NOT NULL, finished_at = now.t
      FROM now
     WHERE s.workflow_id = $1::uuid AND s.position = $2::int AND s.state = 'RUNNING'
    RETURNING s.workflow_id, s.position
),
w AS (
    DELETE FROM workflow_waits x USING s WHERE x.workflow_id = s.workflow_id AND x.position = s.position
)
SELECT count(*) FROM s

-- name: workflow_wait_insert
-- The open wait of a RUNNING wait row, for an event's probe.
INSERT INTO workflow_waits (workflow_id, position, tenant_id, name, match)
VALUES ($1::uuid, $2::int, $3::text, $4::text, $5::jsonb)
    ON CONFLICT (workflow_id, position) DO NOTHING

-- name: workflow_inbox_take
-- Consume the run's oldest unconsumed inbox event named $2 whose data
-- contains $3 (jsonb containment) into the wait at position $4; returns its
-- data (JSON text), nothing when none matches.
WITH e AS (
    SELECT i.seq FROM workflow_inbox i
     WHERE i.workflow_id = $1::uuid AND i.name = $2::text AND i.consumed_by IS NULL AND i.data @> $3::jsonb
     ORDER BY i.seq
     LIMIT 1
       FOR UPDATE
)
UPDATE workflow_inbox i
   SET consumed_by = $4::int, consumed_at = clock_timestamp()
  FROM e
 WHERE i.workflow_id = $1::uuid AND i.seq = e.seq
RETURNING convert_to(i.data::text, 'UTF8') AS data

-- name: workflow_suspend_batch
-- transitions: LEASED->WAITING
-- A workflow activation stopped at a sleep or wait (a SUSPENDED completion),
-- for the tasks task_complete_lock locked just before (lock first, then this
-- statement's snapshot reads the step: an event that committed in between is
-- seen). Each (task $1, lease epoch $2, the awaited position $3, seconds to
-- the wake-up $4 or NULL, checkpoint $5, reason $6): WAITING under the
-- lease's fence, max_attempts + 1 (an activation that suspends uses up no
-- attempt; both counters only grow), the lease's columns cleared, the
-- attempt logged with its end (outcome SUSPENDED, the lease read off the
-- row as task_transition_apply does), and a `wake` timer under the run's
-- lease epoch at now + $4 when given (else at the awaited step's wake_at).
-- Returns, per run, whether the awaited step is still RUNNING (awaiting):
-- when it is not, an event completed it first and the caller wakes the run
-- at once (workflow_wake_batch).
WITH now AS (SELECT clock_timestamp() AS t),
i AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::float8[], $5::bytea[], $6::text[])
        AS i(task_id, lease_epoch, position, wake_after_s, checkpoint, reason)
),
upd AS (
    UPDATE tasks t
       SET state = 'WAITING',
           version = t.version + 1,
           max_attempts = t.max_attempts + 1,
           updated_at = now.t,
           lease_expires_at = NULL,
           attempt_deadline = NULL,
           kill_at = NULL,
           lease_check_at = NULL,
           cancel_requested = false,
           cancel_reason = NULL,
           checkpoint = COALESCE(i.checkpoint, t.checkpoint)
      FROM i CROSS JOIN LATERAL (
               SELECT o.updated_at, o.attempt, o.worker_id FROM tasks o WHERE o.task_id = i.task_id LIMIT 1) lease,
           now
     WHERE t.task_id = ANY($1::uuid[]) AND t.task_id = i.task_id
       AND t.state = 'LEASED' AND t.lease_epoch = i.lease_epoch
    RETURNING t.task_id, t.version, t.state, t.lease_epoch, lease.updated_at AS leased_at,
              lease.attempt AS leased_attempt, lease.worker_id AS leased_worker
),
tr AS (
    INSERT INTO task_log (task_id, version, from_state, to_state, lease_epoch, at, reason, outcome,
                          leased_at, attempt, worker_id)
    SELECT upd.task_id, upd.version, 'LEASED', 'WAITING', upd.lease_epoch, now.t, i.reason, 'SUSPENDED',
           upd.leased_at, upd.leased_attempt, upd.leased_worker
      FROM upd JOIN i ON i.task_id = upd.task_id CROSS JOIN now
),
wake AS (
    -- Without $4 the awaited step's own wake_at (a sleep's end, a wait's timeout) is the
    -- wake-up, so a suspension that leaves wake_after out still wakes; a wait without a
    -- timeout has none: only its event wakes the run.
    INSERT INTO timer_queue (task_id, kind, fire_at, lease_epoch)
    SELECT upd.task_id, 'wake', w.fire_at, upd.lease_epoch
      FROM upd JOIN i ON i.task_id = upd.task_id CROSS JOIN now
     CROSS JOIN LATERAL (
           SELECT COALESCE(now.t + make_interval(secs => i.wake_after_s),
                           (SELECT s.wake_at FROM workflow_steps s
                             WHERE s.workflow_id = i.task_id AND s.position = i.position AND s.state = 'RUNNING'))
               AS fire_at) w
     WHERE w.fire_at IS NOT NULL
    ON CONFLICT (task_id, kind) DO UPDATE SET fire_at = EXCLUDED.fire_at, lease_epoch = EXCLUDED.lease_epoch
)
SELECT upd.task_id, upd.state, upd.version,
       EXISTS (SELECT 1 FROM workflow_steps s
                WHERE s.workflow_id = upd.task_id AND s.position = i.position AND s.state = 'RUNNING') AS awaiting
  FROM upd JOIN i ON i.task_id = upd.task_id

-- name: workflow_wake_batch
-- transitions: WAITING->ENQUEUED
-- Wake suspended runs (their sleep ended, their wait's event came or timed
-- out, or the step they suspended on completed first): ENQUEUED and due now
-- (run_at = now: a woken run queues behind work already due, not ahead of
-- it), logged with reason $2, the run's `wake` timer deleted. A run that is
-- not WAITING (woken already, cancelled, leased) is left as it is. Returns
-- the runs woken.
WITH now AS (SELECT clock_timestamp() AS t),
upd AS (
    UPDATE tasks t
       SET state = 'ENQUEUED', version = t.version + 1, run_at = now.t, updated_at = now.t
      FROM now
     WHERE t.task_id = ANY($1::uuid[]) AND t.state = 'WAITING'
    RETURNING t.task_id, t.version, t.lease_epoch, t.updated_at
),
tr AS (
    INSERT INTO task_log (task_id, version, from_state, to_state, lease_epoch, at, reason)
    SELECT upd.task_id, upd.version, 'WAITING', 'ENQUEUED', upd.lease_epoch, upd.updated_at, $2::text FROM upd
),
gone AS (
    DELETE FROM timer_queue m USING upd WHERE m.task_id = upd.task_id AND m.kind = 'wake'
)
SELECT upd.task_id, upd.version FROM upd

-- name: workflow_waits_delete_batch
-- Drop the open waits of runs that ended (cancelled, expired): no event
-- completes a step of a run that will not run again.
DELETE FROM workflow_waits WHERE workflow_id = ANY($1::uuid[])

-- name: workflow_task_owner
-- Who owns a run and its state (GetWorkflowSteps' check, as GetTask's).
SELECT t.tenant_id, t.state FROM tasks t WHERE t.task_id = $1::uuid

-- name: workflow_step_page
-- Up to $3 rows of the log from position $2, in position order.
SELECT s.position, s.name, s.kind, s.state, s.lease_epoch, s.attempt, s.result, s.error_class,
       s.error_message, s.error_stack, s.fatal, s.wake_at, s.started_at, s.finished_at,
       NULL::float8 AS wake_in_s
  FROM workflow_steps s
 WHERE s.workflow_id = $1::uuid AND s.position >= $2::int
 ORDER BY s.position
 LIMIT $3::int

-- name: workflow_step_count
-- How many rows the log holds (positions are dense: also the next position).
SELECT count(*)::int FROM workflow_steps WHERE workflow_id = $1::uuid

-- name: workflow_pending
-- The sleep or wait a suspended run waits on: the last RUNNING SLEEP or WAIT
-- row of its log, with the wait's match.
SELECT s.position, s.name, s.kind, s.wake_at, w.match::text AS match
  FROM workflow_steps s
  LEFT JOIN workflow_waits w ON w.workflow_id = s.workflow_id AND w.position = s.position
 WHERE s.workflow_id = $1::uuid AND s.state = 'RUNNING' AND s.kind IN ('SLEEP', 'WAIT')
 ORDER BY s.position DESC
 LIMIT 1

-- name: workflow_inbox_deliver
-- An event ($2 name, $3 data as JSON text) into the inbox of run $1, whose
-- task row the caller locked: when the run has an open wait of that name
-- whose match the data contains and whose timeout has not passed, the event
-- completes it (step COMPLETED with the data, the wait deleted, the inbox
-- row consumed by it); else the row waits in the inbox for a later wait.
-- $4: the event's id (NULL: none; a resent id is found first, workflow_inbox_event_seen).
-- Returns the position of the wait it completed, nothing otherwise.
WITH now AS (SELECT clock_timestamp() AS t),
m AS (
    SELECT w.workflow_id, w.position
      FROM workflow_waits w
      JOIN workflow_steps s ON s.workflow_id = w.workflow_id AND s.position = w.position
     CROSS JOIN now
     WHERE w.workflow_id = $1::uuid AND w.name = $2::text AND $3::jsonb @> w.match
       AND s.state = 'RUNNING' AND (s.wake_at IS NULL OR s.wake_at > now.t)
     ORDER BY w.position
     LIMIT 1
),
s AS (
    UPDATE workflow_steps x
       SET state = 'COMPLETED', result = convert_to($3::jsonb::text, 'UTF8'), finished_at = now.t
      FROM m, now
     WHERE x.workflow_id = m.workflow_id AND x.position = m.position AND x.state = 'RUNNING'
    RETURNING x.workflow_id, x.position
),
d AS (
    DELETE FROM workflow_waits x USING s WHERE x.workflow_id = s.workflow_id AND x.position = s.position
),
ins AS (
    INSERT INTO workflow_inbox (workflow_id, name, data, received_at, consumed_by, consumed_at, event_id)
    SELECT $1::uuid, $2::text, $3::jsonb, now.t, (SELECT s.position FROM s),
           CASE WHEN EXISTS (SELECT 1 FROM s) THEN now.t END, $4::text
      FROM now
)
SELECT s.position FROM s

-- name: workflow_waits_probe
-- A broadcast's next candidates: runs after $4 (workflow_id order) with an
-- open wait of tenant $1 named $2 whose match the data $3 contains, at most
-- $5. Unlocked: workflow_broadcast_apply decides under the task rows' locks.
SELECT DISTINCT w.workflow_id
  FROM workflow_waits w
 WHERE w.tenant_id = $1::text AND w.name = $2::text AND $3::jsonb @> w.match AND w.workflow_id > $4::uuid
 ORDER BY w.workflow_id
 LIMIT $5::int

-- name: workflow_tasks_lock
-- Lock the task rows of runs a broadcast may complete, in workflow_id order
-- (two broadcasts, or a broadcast and a batch of completions, take them in
-- one order: no deadlock).
SELECT t.task_id FROM tasks t WHERE t.task_id = ANY($1::uuid[]) ORDER BY t.task_id FOR NO KEY UPDATE

-- name: workflow_broadcast_apply
-- A broadcast event (tenant $2, name $3, data $4 as JSON text) completes the
-- open waits of runs $1 (locked by workflow_tasks_lock) whose match the data
-- contains and whose timeout has not passed, on runs that have not ended
-- (step COMPLETED with the data, wait deleted). The waits of runs that ended
-- are dropped on the way. Returns each (run, position) completed.
WITH now AS (SELECT clock_timestamp() AS t),
m AS (
    SELECT w.workflow_id, w.position
      FROM workflow_waits w
      JOIN workflow_steps s ON s.workflow_id = w.workflow_id AND s.position = w.position
      JOIN tasks t ON t.task_id = w.workflow_id
     CROSS JOIN now
     WHERE w.workflow_id = ANY($1::uuid[]) AND w.tenant_id = $2::text AND w.name = $3::text
       AND $4::jsonb @> w.match AND s.state = 'RUNNING' AND (s.wake_at IS NULL OR s.wake_at > now.t)
       AND t.state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')
),
s AS (
    UPDATE workflow_steps x
       SET state = 'COMPLETED', result = convert_to($4::jsonb::text, 'UTF8'), finished_at = now.t
      FROM m, now
     WHERE x.workflow_id = m.workflow_id AND x.position = m.position AND x.state = 'RUNNING'
    RETURNING x.workflow_id, x.position
),
d AS (
    DELETE FROM workflow_waits x USING s WHERE x.workflow_id = s.workflow_id AND x.position = s.position
),
ended AS (
    DELETE FROM workflow_waits x USING tasks t
     WHERE x.workflow_id = ANY($1::uuid[]) AND t.task_id = x.workflow_id
       AND t.state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')
)
SELECT s.workflow_id, s.position FROM s

-- name: task_cancel_lock
-- CancelTask's lock of one task (task_lock's columns), with whether its
-- cancel keeps it for its compensations: the log holds an ON_CANCEL row
-- (has_compensations), and whether it was so cancelled already (its
-- workflow_cancels row, looked up only for a run with compensations). One
-- statement as before: an ordinary task pays one index probe that finds
-- nothing, no round trip.
SELECT t.task_id, t.tenant_id, t.state, t.lease_epoch, t.cancel_requested, h.has_compensations,
       CASE WHEN h.has_compensations
            THEN EXISTS (SELECT 1 FROM workflow_cancels c WHERE c.workflow_id = t.task_id) ELSE false END
           AS cancelled
  FROM tasks t
 CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM workflow_steps s
                                     WHERE s.workflow_id = t.task_id AND s.kind = 'ON_CANCEL')
                            AS has_compensations) h
 WHERE t.task_id = $1::uuid
   FOR NO KEY UPDATE OF t

-- name: workflow_cancel_insert
-- Keep a run's cancel until the activation that runs its compensations
-- ends it (reason $2: user).
INSERT INTO workflow_cancels (workflow_id, requested_at, reason)
VALUES ($1::uuid, clock_timestamp(), $2::text)
    ON CONFLICT (workflow_id) DO NOTHING

-- name: workflow_cancel_enqueue
-- transitions: RETRY_WAIT->ENQUEUED, WAITING->ENQUEUED
-- A cancelled run with compensations that waits (a retry's backoff, a
-- suspension): ENQUEUED and due now (its next activation runs them),
-- logged with reason $2; its retry and wake timers deleted (a stale one
-- would find the state moved and do nothing, but it need not fire). An
-- ENQUEUED run is left as it is: it is due already (a run is ENQUEUED
-- again only by a wake, due now, or a retry, due when it fired). Returns
-- the new version, or nothing when the run was not RETRY_WAIT or WAITING.
WITH now AS (SELECT clock_timestamp() AS t),
old AS (SELECT t.task_id, t.state FROM tasks t WHERE t.task_id = $1::uuid),
upd AS (
    UPDATE tasks t
       SET state = 'ENQUEUED', version = t.version + 1, run_at = now.t, updated_at = now.t
      FROM now, old
     WHERE t.task_id = old.task_id AND (t.state = 'RETRY_WAIT' OR t.state = 'WAITING')
    RETURNING t.task_id, t.version, t.lease_epoch, t.updated_at
),
tr AS (
    INSERT INTO task_log (task_id, version, from_state, to_state, lease_epoch, at, reason)
    SELECT upd.task_id, upd.version, old.state, 'ENQUEUED', upd.lease_epoch, upd.updated_at, $2::text
      FROM upd JOIN old ON old.task_id = upd.task_id
),
gone AS (
    DELETE FROM timer_queue m USING upd WHERE m.task_id = upd.task_id AND m.kind IN ('retry', 'wake')
)
SELECT upd.version FROM upd

-- name: workflow_cancelled_batch
-- The runs of $1 that hold a cancel for their compensations (their
-- workflow_cancels row): read for a CANCELED completion and a kill after
-- the cancel grace, never on an ordinary path.
SELECT workflow_id FROM workflow_cancels WHERE workflow_id = ANY($1::uuid[])

-- name: workflow_cancels_delete_batch
-- A cancelled run ended: its kept cancel goes.
DELETE FROM workflow_cancels WHERE workflow_id = ANY($1::uuid[])

-- name: workflow_steps_ahead
-- A BEGIN answered DONE at position $2: the completed entries logged right
-- after it, in order and without a gap, of the kinds a resuming run answers
-- from them (STEP, VERSION, SLEEP, WAIT, ON_CANCEL): at most $3 rows, and
-- no more than $4 bytes of results in all. The first entry of another
-- kind or state ends the page (a fan-out, a claim still open, a failure, a
-- compensation: the run asks for those). One index range scan of at most
-- $3 rows on the log's key.
WITH s AS (
    SELECT position, name, kind, state, attempt, result
      FROM workflow_steps
     WHERE workflow_id = $1::uuid AND position > $2::int
     ORDER BY position
     LIMIT $3::int
),
r AS (
    SELECT s.*, row_number() OVER w AS n,
           sum(COALESCE(octet_length(s.result), 0)) OVER w AS bytes,
           bool_and(s.state = 'COMPLETED' AND s.kind IN ('STEP', 'VERSION', 'SLEEP', 'WAIT', 'ON_CANCEL')) OVER w AS ok
      FROM s
    WINDOW w AS (ORDER BY s.position ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT position, name, kind, attempt, result FROM r
 WHERE ok AND position = $2::int + n AND bytes <= $4::bigint
 ORDER BY position
