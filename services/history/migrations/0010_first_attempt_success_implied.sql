-- Less WAL per task: a task that succeeded at its first lease logs nothing.
--
-- After migration 0008 such a task still wrote one task_log row (version 3,
-- LEASED -> SUCCEEDED, with its lease) and its key entry, WAL for what its
-- row already says. Version 3 and SUCCEEDED can only be
-- create (1, ENQUEUED) -> lease (2, LEASED) -> success (3): the lease is the
-- row's first start (started_at), attempt, worker_id and lease_epoch, the
-- success is its finished_at. The statement that ends such a lease now logs no
-- row when the end is the completion's own success ('succeeded', outcome
-- SUCCEEDED, no error), and the views read those two transitions and the
-- attempt off the row. A logged version-3 row (any other reason) still wins:
-- the row implies them only when the log has no version 3.
--
-- Every other history is unchanged: a retry, a failure, a cancel, a bulk
-- retry's create, a lease that expired all keep their rows.

DELETE FROM task_log l
 USING tasks t
 WHERE l.task_id = t.task_id AND t.state = 'SUCCEEDED' AND t.version = 3 AND l.version = 3
   AND l.from_state = 'LEASED' AND l.to_state = 'SUCCEEDED' AND l.reason = 'succeeded'
   AND l.outcome = 'SUCCEEDED' AND l.error_class IS NULL AND l.error_message IS NULL
   AND l.error_stack IS NULL AND l.lease_epoch = t.lease_epoch AND l.at = t.finished_at
   AND l.leased_at = t.started_at AND l.attempt = t.attempt AND l.worker_id = t.worker_id;

CREATE OR REPLACE VIEW task_transitions AS
SELECT t.task_id, 1::bigint AS version, NULL::text AS from_state, 'ENQUEUED'::text AS to_state,
       0::bigint AS lease_epoch, t.created_at AS at, 'created'::text AS reason, NULL::integer AS attempt,
       NULL::text AS worker_id, NULL::text AS outcome, NULL::text AS error_class, NULL::text AS error_message,
       NULL::text AS error_stack
  FROM tasks t WHERE t.retry_of IS NULL
UNION ALL
SELECT t.task_id, t.version, 'ENQUEUED', 'LEASED', t.lease_epoch, t.updated_at, 'leased', t.attempt,
       t.worker_id, NULL, NULL, NULL, NULL
  FROM tasks t WHERE t.state = 'LEASED'
UNION ALL
SELECT l.task_id, l.version - 1, 'ENQUEUED', 'LEASED', l.lease_epoch, l.leased_at, 'leased', l.attempt,
       l.worker_id, NULL, NULL, NULL, NULL
  FROM task_log l WHERE l.leased_at IS NOT NULL
UNION ALL
SELECT l.task_id, l.version, l.from_state, l.to_state, l.lease_epoch, l.at, l.reason, NULL, NULL,
       l.outcome, l.error_class, l.error_message, l.error_stack
  FROM task_log l
UNION ALL
SELECT t.task_id, x.version, x.from_state, x.to_state, t.lease_epoch, x.at, x.reason, x.attempt, x.worker_id,
       x.outcome, NULL, NULL, NULL
  FROM tasks t
 CROSS JOIN LATERAL (VALUES
       (2::bigint, 'ENQUEUED'::text, 'LEASED'::text, t.started_at, 'leased'::text, t.attempt, t.worker_id,
        NULL::text),
       (3::bigint, 'LEASED'::text, 'SUCCEEDED'::text, t.finished_at, 'succeeded'::text, NULL::integer, NULL::text,
        'SUCCEEDED'::text)) AS x(version, from_state, to_state, at, reason, attempt, worker_id, outcome)
 WHERE t.state = 'SUCCEEDED' AND t.version = 3
   AND NOT EXISTS (SELECT 1 FROM task_log l WHERE l.task_id = t.task_id AND l.version = 3);

CREATE OR REPLACE VIEW task_attempts AS
SELECT t.task_id, t.attempt, t.lease_epoch, t.worker_id, t.updated_at AS started_at,
       NULL::timestamptz AS finished_at, 'RUNNING'::text AS outcome, NULL::text AS error_class,
       NULL::text AS error_message, NULL::text AS error_stack
  FROM tasks t WHERE t.state = 'LEASED'
UNION ALL
SELECT l.task_id, l.attempt, l.lease_epoch, l.worker_id, l.leased_at, l.at, COALESCE(l.outcome, 'RUNNING'),
       l.error_class, l.error_message, l.error_stack
  FROM task_log l WHERE l.leased_at IS NOT NULL
UNION ALL
SELECT t.task_id, t.attempt, t.lease_epoch, t.worker_id, t.started_at, t.finished_at, 'SUCCEEDED',
       NULL, NULL, NULL
  FROM tasks t
 WHERE t.state = 'SUCCEEDED' AND t.version = 3
   AND NOT EXISTS (SELECT 1 FROM task_log l WHERE l.task_id = t.task_id AND l.version = 3);
