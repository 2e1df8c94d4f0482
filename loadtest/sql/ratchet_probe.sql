-- Read-only probes of history's shard tables (schema: services/history/
-- migrations). The bench reads the platform's own timings here; it never
-- writes to a shard.

-- name: task_count_enqueued
-- Cheap while a drain runs: answered from the partial dispatch index.
SELECT count(*) FROM tasks WHERE state = 'ENQUEUED';

-- name: task_count_unfinished
-- A full scan: only once nothing is ENQUEUED any more.
SELECT count(*) FROM tasks WHERE state IN ('ENQUEUED', 'LEASED', 'RETRY_WAIT');

-- name: task_drain_summary
-- Tasks that started at or after $1 and finished by $2 (both shard clock).
SELECT count(*) FILTER (WHERE state = 'SUCCEEDED' AND finished_at <= $2) AS succeeded,
       count(*) FILTER (WHERE state IN ('FAILED', 'CANCELED', 'EXPIRED')) AS other,
       min(started_at) AS first_start,
       max(finished_at) FILTER (WHERE finished_at <= $2) AS last_finish,
       sum(attempt) AS attempts
FROM tasks WHERE started_at >= $1;

-- name: shard_clock_now
SELECT clock_timestamp();

-- name: task_timings_by_ids
-- The bench's own tasks (by id): state and the shard clock's timings, for
-- schedule-to-start under load, timer lateness and recovery.
SELECT task_id::text AS task_id, state, created_at, started_at, finished_at, attempt
FROM tasks WHERE task_id = ANY($1::uuid[]);

-- name: workflow_run_summary
-- Runs of workflow handler $1 created at or after $2 (shard clock): how they ended, the
-- platform's own first start and last finish, their activations and the steps they logged.
SELECT count(*) FILTER (WHERE t.state = 'SUCCEEDED') AS succeeded,
       count(*) FILTER (WHERE t.state <> 'SUCCEEDED') AS other,
       min(t.started_at) AS first_start,
       max(t.finished_at) AS last_finish,
       sum(t.attempt) AS attempts,
       (SELECT count(*) FROM workflow_steps s WHERE s.workflow_id IN (
            SELECT task_id FROM tasks WHERE task_type = $1 AND created_at >= $2)) AS steps_logged
FROM tasks t WHERE t.task_type = $1 AND t.created_at >= $2;
