-- Named queries of workflow fan-outs (docs/design/workflows-protocol.md,
-- "Fan-out"; migration 0017): a fan-out step and its striped barrier on the
-- parent's shard, the children's links and end outbox on the children's
-- shards, and the record of each child's end (workflow_child_done) on the
-- parent's. A child's end is written to the outbox by task_transition_apply
-- (tasks.sql), in the statement that ends it; these deliver it.

-- name: workflow_fanout_insert
-- A new fan-out step at a position: RUNNING with child_count $6 and
-- on_failure $7, and its barrier: K = min(16, n) stripe rows (children with
-- index % K = stripe, not yet ended) and the top row (stripe -1: the stripes
-- not yet at zero). Nothing when a concurrent op inserted the position first.
-- Returns 1 when inserted.
WITH now AS (SELECT clock_timestamp() AS t),
s AS (
    INSERT INTO workflow_steps (workflow_id, position, name, kind, state, lease_epoch, attempt,
                                child_count, on_failure, started_at)
    SELECT $1::uuid, $2::int, $3::text, $4::text, 'RUNNING', $5::bigint, 1, $6::int, $7::text, now.t FROM now
        ON CONFLICT (workflow_id, position) DO NOTHING
    RETURNING workflow_id, position, child_count, least(16, child_count) AS k
),
b AS (
    INSERT INTO workflow_barriers (workflow_id, position, stripe, remaining)
    SELECT s.workflow_id, s.position, g.stripe,
           CASE WHEN g.stripe = -1 THEN s.k ELSE (s.child_count - g.stripe + s.k - 1) / s.k END
      FROM s CROSS JOIN LATERAL generate_series(-1, s.k - 1) AS g(stripe)
)
SELECT count(*)::int FROM s

-- name: workflow_fanout_lock
-- The fan-out row at a position, locked, with its child count and policy
-- (a resent BEGIN waits for the first).
SELECT s.name, s.kind, s.state, s.attempt, s.child_count, s.on_failure
  FROM workflow_steps s
 WHERE s.workflow_id = $1::uuid AND s.position = $2::int
   FOR UPDATE

-- name: workflow_child_done_page
-- The recorded ends of a fan-out's children with index in [$3, $3 + $4), by index.
SELECT d.child_index, d.child_id, d.state, d.result, d.error_class, d.error_message
  FROM workflow_child_done d
 WHERE d.workflow_id = $1::uuid AND d.position = $2::int AND d.child_index >= $3::int
   AND d.child_index < $3::int + $4::int
 ORDER BY d.child_index

-- name: workflow_children_link
-- The parent link of children just created in this transaction (CreateTasks
-- with NewTask.parent): each (child $1, parent $2, position $3, index $4)
-- whose task has no parent yet gets parent_id and its workflow_children row.
-- A child that existed already (a resent StartChildren) has its link.
WITH i AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::int[]) AS i(child_id, parent_id, position, child_index)
),
upd AS (
    UPDATE tasks t SET parent_id = i.parent_id
      FROM i
     WHERE t.task_id = ANY($1::uuid[]) AND t.task_id = i.child_id AND t.parent_id IS NULL
    RETURNING t.task_id
)
INSERT INTO workflow_children (child_id, parent_id, position, child_index)
SELECT i.child_id, i.parent_id, i.position, i.child_index FROM i JOIN upd ON upd.task_id = i.child_id
    ON CONFLICT (child_id) DO NOTHING

-- name: workflow_outbox_take
-- Up to $1 child ends of this shard not yet delivered, in child_id order,
-- locked and skipped by a concurrent deliverer.
SELECT o.child_id, o.parent_id, o.position, o.child_index, o.state, o.result, o.error_class, o.error_message,
       o.ended_at
  FROM workflow_child_outbox o
 ORDER BY o.child_id
 LIMIT $1::int
   FOR UPDATE SKIP LOCKED

-- name: workflow_outbox_delete
-- The delivered child ends (recorded on the parent's shard), gone.
DELETE FROM workflow_child_outbox WHERE child_id = ANY($1::uuid[])

-- name: workflow_barriers_lock
-- The stripe rows a delivery batch (parent $1, position $2, index $3) may
-- decrement, locked in (run, position, stripe) order before
-- workflow_child_deliver (then workflow_barrier_tops_lock), so two
-- deliverers of one fan-out's children (two shards' loops) take them in one
-- order and never deadlock on them. Returns each with its remaining count
-- and the fan-out's K.
SELECT b.workflow_id, b.position, b.stripe, b.remaining, x.k
  FROM workflow_barriers b
  JOIN (SELECT DISTINCT i.parent_id, i.position, i.child_index % least(16, s.child_count) AS stripe,
               least(16, s.child_count) AS k
          FROM unnest($1::uuid[], $2::int[], $3::int[]) AS i(parent_id, position, child_index)
          JOIN workflow_steps s ON s.workflow_id = i.parent_id AND s.position = i.position
         WHERE s.kind IN ('PARALLEL', 'CHILD')) x
    ON b.workflow_id = x.parent_id AND b.position = x.position AND b.stripe = x.stripe
 ORDER BY b.workflow_id, b.position, b.stripe
   FOR UPDATE OF b

-- name: workflow_barrier_tops_lock
-- The top rows (stripe -1) of the fan-outs ($1, $2) whose stripes this batch
-- may bring to zero, locked in order after their stripes (every deliverer
-- takes stripes, then tops, each in (run, position) order).
SELECT 1
  FROM workflow_barriers b
  JOIN unnest($1::uuid[], $2::int[]) AS i(workflow_id, position)
    ON b.workflow_id = i.workflow_id AND b.position = i.position AND b.stripe = -1
 ORDER BY b.workflow_id, b.position
   FOR UPDATE OF b

-- name: workflow_child_deliver
-- On the parent's shard: record children's ends (child $1, parent $2,
-- position $3, index $4, state $5, result $6, error $7 $8, ended at $9) once
-- each (the key dedupes a resent delivery: a decrement happens only with its
-- insert); each inserted end decrements its stripe (index % K); a stripe
-- reaching zero decrements the top row; the top row reaching zero, or (with
-- FAIL_FAST) a child that did not succeed, completes the step if it is still
-- RUNNING. Returns the fan-outs completed now, with why (all ended, or the
-- first failure).
WITH i AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::int[], $5::text[], $6::bytea[], $7::text[],
                         $8::text[], $9::timestamptz[])
        AS i(child_id, parent_id, position, child_index, state, result, error_class, error_message, ended_at)
),
f AS (
    -- the fan-outs of these ends (each step row read once)
    SELECT s.workflow_id, s.position, least(16, s.child_count) AS k, s.on_failure
      FROM workflow_steps s
     WHERE (s.workflow_id, s.position) IN (SELECT DISTINCT i.parent_id, i.position FROM i)
       AND s.kind IN ('PARALLEL', 'CHILD')
),
ins AS (
    INSERT INTO workflow_child_done (workflow_id, position, child_index, child_id, state, result, error_class,
                                     error_message, ended_at)
    SELECT i.parent_id, i.position, i.child_index, i.child_id, i.state, i.result, i.error_class, i.error_message,
           i.ended_at
      FROM i JOIN f ON f.workflow_id = i.parent_id AND f.position = i.position
        ON CONFLICT (workflow_id, position, child_index) DO NOTHING
    RETURNING workflow_id, position, child_index, state
),
dec AS (
    SELECT ins.workflow_id, ins.position, ins.child_index % f.k AS stripe, count(*)::int AS n,
           bool_or(ins.state <> 'SUCCEEDED' AND f.on_failure = 'FAIL_FAST') AS fails
      FROM ins JOIN f ON f.workflow_id = ins.workflow_id AND f.position = ins.position
     GROUP BY 1, 2, 3
),
stripes AS (
    UPDATE workflow_barriers b SET remaining = b.remaining - dec.n
      FROM dec
     WHERE b.workflow_id = dec.workflow_id AND b.position = dec.position AND b.stripe = dec.stripe
    RETURNING b.workflow_id, b.position, b.remaining = 0 AS zero
),
top AS (
    UPDATE workflow_barriers b SET remaining = b.remaining - z.n
      FROM (SELECT workflow_id, position, count(*)::int AS n FROM stripes WHERE zero GROUP BY 1, 2) z
     WHERE b.workflow_id = z.workflow_id AND b.position = z.position AND b.stripe = -1
    RETURNING b.workflow_id, b.position, b.remaining = 0 AS zero
),
fire AS (
    SELECT top.workflow_id, top.position, 'all' AS why FROM top WHERE top.zero
    UNION
    SELECT dec.workflow_id, dec.position, 'failed' FROM dec WHERE dec.fails
),
done AS (
    UPDATE workflow_steps s SET state = 'COMPLETED', finished_at = clock_timestamp()
      FROM (SELECT workflow_id, position, min(why) AS why FROM fire GROUP BY 1, 2) x
     WHERE s.workflow_id = x.workflow_id AND s.position = x.position AND s.state = 'RUNNING'
    RETURNING s.workflow_id, s.position, x.why, s.on_failure
)
SELECT done.workflow_id, done.position, done.why, done.on_failure FROM done

-- name: workflow_cascade_open
-- A cascade to cancel the children of each open (RUNNING) fan-out of runs
-- $1 (a cancelled parent), or of the fan-out ($1, $2) (a fail_fast that
-- fired), recorded durably on the parent's shard: a workflow_cascades row
-- (next_index: the next child to cancel) that the delivery loop drives.
-- Returns how many were opened.
WITH c AS (
    INSERT INTO workflow_cascades (workflow_id, position, next_index, opened_at)
    SELECT s.workflow_id, s.position, 0, clock_timestamp()
      FROM workflow_steps s
     WHERE s.workflow_id = ANY($1::uuid[]) AND s.kind IN ('PARALLEL', 'CHILD')
       AND ($2::int IS NULL OR s.position = $2::int)
       AND ($2::int IS NOT NULL OR s.state = 'RUNNING')
        ON CONFLICT (workflow_id, position) DO NOTHING
    RETURNING 1
)
SELECT count(*)::int FROM c

-- name: workflow_cascade_take
-- Up to $1 open cascades of this shard, locked (a concurrent loop skips
-- them), with each fan-out's child count.
SELECT c.workflow_id AS parent_id, c.position, c.next_index AS cursor, s.child_count
  FROM workflow_cascades c
  JOIN workflow_steps s ON s.workflow_id = c.workflow_id AND s.position = c.position
 ORDER BY c.workflow_id, c.position
 LIMIT $1::int
   FOR UPDATE OF c SKIP LOCKED

-- name: workflow_cascade_advance
-- The cascade of fan-out ($1, $2): its cursor moved to $3, or (at or past
-- the fan-out's end, $4) gone.
WITH a AS (
    UPDATE workflow_cascades SET next_index = $3::int
     WHERE workflow_id = $1::uuid AND position = $2::int AND $3::int < $4::int
),
d AS (
    DELETE FROM workflow_cascades WHERE workflow_id = $1::uuid AND position = $2::int AND $3::int >= $4::int
)
SELECT 1

-- name: workflow_children_states
-- The state and task type of fan-out children on this shard (ListWorkflowChildren).
SELECT t.task_id, t.state, t.task_type FROM tasks t WHERE t.task_id = ANY($1::uuid[])

-- name: workflow_children_cancel_lock
-- The children of a cascade batch that are not terminal, locked in task_id
-- order (as task_complete_lock), with what the cancel decision reads.
SELECT t.task_id, t.state, t.lease_epoch, t.cancel_requested
  FROM tasks t
 WHERE t.task_id = ANY($1::uuid[]) AND t.state IN ('ENQUEUED', 'RETRY_WAIT', 'WAITING', 'LEASED')
 ORDER BY t.task_id
   FOR NO KEY UPDATE

-- name: workflow_fanout_counts
-- Per fan-out row of a run's log from position $2 (up to $3 rows), how many
-- children have ended (GetWorkflowSteps' children_done).
SELECT s.position, s.child_count, (SELECT count(*)::int FROM workflow_child_done d
                                    WHERE d.workflow_id = s.workflow_id AND d.position = s.position) AS done
  FROM workflow_steps s
 WHERE s.workflow_id = $1::uuid AND s.position >= $2::int AND s.position < $2::int + $3::int
   AND s.kind IN ('PARALLEL', 'CHILD')

-- name: workflow_inbox_event_seen
-- A resent inbox event: whether (run $1, event id $2) is kept, and whether
-- it completed a wait when it came (what the first delivery answered: a
-- wait's BEGIN that took it later stamps a later consumed_at).
SELECT (i.consumed_at IS NOT NULL AND i.consumed_at = i.received_at) AS consumed FROM workflow_inbox i
 WHERE i.workflow_id = $1::uuid AND i.event_id = $2::text
