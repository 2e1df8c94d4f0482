-- Named queries on bulk_operations and bulk_operation_failures (this
-- shard's part of each operation). The task changes an operation makes are
-- in tasks.sql (task_retry_batch, task_transition_apply,
-- task_cancel_request_batch).

-- name: bulk_operation_insert
-- Start an operation part; an existing id is left alone (Start is
-- idempotent), and then nothing comes back.
INSERT INTO bulk_operations (operation_id, tenant_id, app_id, kind, filter, registered_task_types, state,
                             matched, bound_at, created_at, updated_at)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::jsonb, $6::text[], 'RUNNING', $7::bigint,
        $8::timestamptz, clock_timestamp(), clock_timestamp())
ON CONFLICT (operation_id) DO NOTHING
RETURNING *

-- name: bulk_operation_get
SELECT * FROM bulk_operations WHERE operation_id = $1::text

-- name: bulk_operation_lock
-- Lock a running operation for one batch. SKIP LOCKED: another history
-- process already running this operation's batch is left to it.
SELECT * FROM bulk_operations WHERE operation_id = $1::text AND state = 'RUNNING'
   FOR UPDATE SKIP LOCKED

-- name: bulk_operation_running
-- Running operation parts, oldest first (the bulk loop's work list).
SELECT operation_id FROM bulk_operations WHERE state = 'RUNNING' ORDER BY created_at LIMIT $1

-- name: bulk_operation_advance
-- Record one batch: counts, the cursor after it, and (when $8, the scan ran
-- out) the end. At the end, items that matched at the start but were not
-- reached (they stopped matching first, e.g. a task cancelled while the
-- operation ran) count as skipped, so processed = matched.
WITH n AS (
    SELECT b.operation_id, b.processed + $2::bigint + $3::bigint + $4::bigint AS processed
      FROM bulk_operations b WHERE b.operation_id = $1::text AND b.state = 'RUNNING'
)
UPDATE bulk_operations b
   SET succeeded = b.succeeded + $2::bigint,
       failed = b.failed + $3::bigint,
       skipped = b.skipped + $4::bigint + CASE WHEN $8::bool THEN greatest(0, b.matched - n.processed) ELSE 0 END,
       processed = CASE WHEN $8::bool THEN greatest(b.matched, n.processed) ELSE n.processed END,
       matched = CASE WHEN $8::bool THEN greatest(b.matched, n.processed) ELSE b.matched END,
       cursor_state = $5::text, cursor_time = $6::timestamptz, cursor_task_id = $7::uuid,
       state = CASE WHEN $8::bool THEN 'SUCCEEDED' ELSE b.state END,
       finished_at = CASE WHEN $8::bool THEN clock_timestamp() END,
       updated_at = clock_timestamp()
  FROM n
 WHERE b.operation_id = n.operation_id AND b.state = 'RUNNING'
RETURNING b.*

-- name: bulk_operation_cancel
-- Stop a running operation; the batch in flight (it holds the row lock)
-- finishes first, and the loop finds it no longer RUNNING at the next one.
UPDATE bulk_operations
   SET state = 'CANCELED', finished_at = clock_timestamp(), updated_at = clock_timestamp()
 WHERE operation_id = $1::text AND state = 'RUNNING'
RETURNING *

-- name: bulk_operation_failure_add_batch
-- Keep the first 1,000 failures of an operation part, numbered after the
-- $2 already recorded.
INSERT INTO bulk_operation_failures (operation_id, seq, task_id, reason, at)
SELECT $1::text, $2::int + i.n, i.task_id, i.reason, clock_timestamp()
  FROM unnest($3::uuid[], $4::text[]) WITH ORDINALITY AS i(task_id, reason, n)
 WHERE $2::int + i.n <= 1000

-- name: bulk_operation_failure_list
-- The recorded failures, oldest first.
SELECT task_id, reason FROM bulk_operation_failures WHERE operation_id = $1::text ORDER BY seq
