-- Named queries for searching a tenant's tasks (ListTasks, CountTasks) and
-- for the scans of bulk operations. Sort time is finished_at for terminal
-- tasks and created_at otherwise (the CHECK makes finished_at IS NOT NULL
-- mean terminal). Bounds are always passed (-infinity/infinity, the nil or
-- max uuid), never NULL, so they stay index conditions in generic plans;
-- `cardinality(states) > 0` is a one-time filter that skips a part of the
-- query whose state list is empty without scanning anything.

-- name: task_list_page
-- One page of (tenant $1, app $2) tasks, newest first by (sort time,
-- task_id), strictly older than the cursor ($10, $11). Terminal states
-- ($3) are read one state at a time from tasks_finished: a backward index
-- range scan per state stopping after $12 rows (the dead-letter search,
-- state FAILED, reads only the page). Live states ($4) have no search index
-- (it would cost every enqueue and lease a write): a scan of the tenant's
-- live rows. Optional filters: task type $5, queue $6, error class $7; sort
-- time in [$8, $9).
SELECT page.* FROM (
    (SELECT x.*, x.finished_at AS sort_at
       FROM unnest($3::text[]) AS s(state)
      CROSS JOIN LATERAL (
            SELECT t.* FROM tasks t
             WHERE t.tenant_id = $1::text AND t.app_id = $2::text AND t.state = s.state
               AND t.finished_at IS NOT NULL
               AND t.finished_at >= $8::timestamptz AND t.finished_at < $9::timestamptz
               AND (t.finished_at, t.task_id) < ($10::timestamptz, $11::uuid)
               AND ($5::text IS NULL OR t.task_type = $5::text)
               AND ($6::text IS NULL OR COALESCE(t.queue, 'default') = $6::text)
               AND ($7::text IS NULL OR t.error_class = $7::text)
             ORDER BY t.finished_at DESC, t.task_id DESC
             LIMIT $12
            ) x)
    UNION ALL
    (SELECT t.*, t.created_at AS sort_at FROM tasks t
      WHERE cardinality($4::text[]) > 0
        AND t.tenant_id = $1::text AND t.app_id = $2::text AND t.state = ANY($4::text[])
        AND t.finished_at IS NULL
        AND t.created_at >= $8::timestamptz AND t.created_at < $9::timestamptz
        AND (t.created_at, t.task_id) < ($10::timestamptz, $11::uuid)
        AND ($5::text IS NULL OR t.task_type = $5::text)
        AND ($6::text IS NULL OR COALESCE(t.queue, 'default') = $6::text)
        AND ($7::text IS NULL OR t.error_class = $7::text)
      ORDER BY t.created_at DESC, t.task_id DESC
      LIMIT $12)
) page
ORDER BY page.sort_at DESC, page.task_id DESC
LIMIT $12

-- name: task_count
-- How many (tenant $1, app $2) tasks match (the same filter as
-- task_list_page), counting only tasks whose sort time is at most $10 (the
-- bound of a bulk operation; infinity for CountTasks).
SELECT (SELECT count(*) FROM tasks t
         WHERE cardinality($3::text[]) > 0
           AND t.tenant_id = $1::text AND t.app_id = $2::text AND t.state = ANY($3::text[])
           AND t.finished_at IS NOT NULL
           AND t.finished_at >= $8::timestamptz AND t.finished_at < $9::timestamptz
           AND t.finished_at <= $10::timestamptz
           AND ($5::text IS NULL OR t.task_type = $5::text)
           AND ($6::text IS NULL OR COALESCE(t.queue, 'default') = $6::text)
           AND ($7::text IS NULL OR t.error_class = $7::text))
     + (SELECT count(*) FROM tasks t
         WHERE cardinality($4::text[]) > 0
           AND t.tenant_id = $1::text AND t.app_id = $2::text AND t.state = ANY($4::text[])
           AND t.finished_at IS NULL
           AND t.created_at >= $8::timestamptz AND t.created_at < $9::timestamptz
           AND t.created_at <= $10::timestamptz
           AND ($5::text IS NULL OR t.task_type = $5::text)
           AND ($6::text IS NULL OR COALESCE(t.queue, 'default') = $6::text)
           AND ($7::text IS NULL OR t.error_class = $7::text)) AS n

-- name: task_bulk_retry_scan
-- The next $13 terminal tasks of a RETRY operation after the cursor
-- ($3, $4, $5) in (state, finished_at, task_id) order: an index range scan
-- of tasks_finished, stable because terminal tasks never change state or
-- finished_at. Only tasks finished by the operation's start ($9) belong to
-- it. Locked, so two operations cannot both retry one task.
SELECT t.task_id, t.state, t.finished_at, t.task_type, t.retried_as
  FROM tasks t
 WHERE t.tenant_id = $1::text AND t.app_id = $2::text AND t.finished_at IS NOT NULL
   AND (t.state, t.finished_at, t.task_id) > ($3::text, $4::timestamptz, $5::uuid)
   AND t.state = ANY($6::text[])
   AND t.finished_at >= $7::timestamptz AND t.finished_at < $8::timestamptz
   AND t.finished_at <= $9::timestamptz
   AND ($10::text IS NULL OR t.task_type = $10::text)
   AND ($11::text IS NULL OR COALESCE(t.queue, 'default') = $11::text)
   AND ($12::text IS NULL OR t.error_class = $12::text)
 ORDER BY t.state, t.finished_at, t.task_id
 LIMIT $13
   FOR NO KEY UPDATE OF t

-- name: task_bulk_cancel_scan
-- The next $11 live tasks of a CANCEL operation after the cursor task id
-- $3, in task_id order (the primary key: live tasks have no search index;
-- ids are time-ordered, so this is one pass over the shard per operation).
-- Only tasks created by the operation's start ($7) belong to it. Locked in
-- id order, the order completions lock in, so they cannot deadlock.
SELECT t.task_id, t.state, t.lease_epoch
  FROM tasks t
 WHERE t.task_id > $3::uuid AND t.tenant_id = $1::text AND t.app_id = $2::text
   AND t.state = ANY($4::text[]) AND t.finished_at IS NULL
   AND t.created_at >= $5::timestamptz AND t.created_at < $6::timestamptz
   AND t.created_at <= $7::timestamptz
   AND ($8::text IS NULL OR t.task_type = $8::text)
   AND ($9::text IS NULL OR COALESCE(t.queue, 'default') = $9::text)
   AND ($10::text IS NULL OR t.error_class = $10::text)
 ORDER BY t.task_id
 LIMIT $11
   FOR NO KEY UPDATE OF t
