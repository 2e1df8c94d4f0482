-- Less WAL per task: the transition log keeps only what no other row
-- already records.
--
-- Every task wrote three log rows, each with a primary-key entry (a large
-- part of a task's WAL), although two of them repeat the task row:
--
-- * the create row (version 1, none -> ENQUEUED, epoch 0, at created_at,
--   reason 'created') is the task row's own created_at. It is now implied by
--   the task row. A bulk retry's new task still logs its create row: its
--   reason names the operation (those tasks have retry_of set).
-- * the lease row (version v, ENQUEUED -> LEASED) holds the attempt number,
--   the worker and the lease time, which the task row carries until the lease
--   ends (the lease sets them, and nothing changes version, worker_id or
--   updated_at while it holds). It is now logged by the statement that ends
--   the lease, in the same row as that transition (version v + 1, leaving
--   LEASED): leased_at, attempt and worker_id. This is how Temporal records
--   an activity's start: in mutable state while it runs, in history with its
--   close.
--
-- The physical table is now `task_log`; the view `task_transitions` lists the
-- same rows as before (the implied create row, the running lease from the
-- task row, a closed lease from the row that ended it, then every logged
-- transition), so every reader keeps its query; `task_attempts` reads one
-- row per attempt straight off the log. A drained task now writes one log
-- row and one key entry instead of three, and the key entries arrive in
-- completion order (near the end of the index) instead of between the
-- enqueue's.

ALTER TABLE task_transitions RENAME TO task_log;
ALTER INDEX task_transitions_pkey RENAME TO task_log_pkey;
DROP VIEW task_attempts;

ALTER TABLE task_log
    DROP CONSTRAINT task_transitions_attempt_on_lease,
    ADD COLUMN leased_at timestamptz;

-- Closed leases: fold each lease row into the row that ended it (the next
-- version: a lease is the only way into LEASED and nothing else bumps the
-- version until it ends).
UPDATE task_log e
   SET leased_at = s.at, attempt = s.attempt, worker_id = s.worker_id
  FROM task_log s
 WHERE e.from_state = 'LEASED' AND s.task_id = e.task_id AND s.version = e.version - 1
   AND s.to_state = 'LEASED';

-- Lease rows are implied now: by the row that ended them, or (the running
-- lease) by the task row.
DELETE FROM task_log WHERE to_state = 'LEASED';

-- Create rows the task row implies.
DELETE FROM task_log l
 USING tasks t
 WHERE l.task_id = t.task_id AND l.version = 1 AND t.retry_of IS NULL;

ALTER TABLE task_log RENAME CONSTRAINT task_transitions_create_first TO task_log_create_first;
ALTER TABLE task_log RENAME CONSTRAINT task_transitions_outcome_on_end TO task_log_outcome_on_end;
ALTER TABLE task_log RENAME CONSTRAINT task_transitions_error_with_outcome TO task_log_error_with_outcome;
ALTER TABLE task_log
    ADD CONSTRAINT task_log_no_lease_rows CHECK (to_state <> 'LEASED'),
    ADD CONSTRAINT task_log_lease_with_its_end CHECK (
        (from_state IS NOT DISTINCT FROM 'LEASED') = (leased_at IS NOT NULL)
        AND (leased_at IS NULL) = (attempt IS NULL)
        AND (leased_at IS NULL) = (worker_id IS NULL));

CREATE VIEW task_transitions AS
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
  FROM task_log l;

-- One row per lease: the running one from the task row, each closed one from
-- the row that ended it.
CREATE VIEW task_attempts AS
SELECT t.task_id, t.attempt, t.lease_epoch, t.worker_id, t.updated_at AS started_at,
       NULL::timestamptz AS finished_at, 'RUNNING'::text AS outcome, NULL::text AS error_class,
       NULL::text AS error_message, NULL::text AS error_stack
  FROM tasks t WHERE t.state = 'LEASED'
UNION ALL
SELECT l.task_id, l.attempt, l.lease_epoch, l.worker_id, l.leased_at, l.at, COALESCE(l.outcome, 'RUNNING'),
       l.error_class, l.error_message, l.error_stack
  FROM task_log l WHERE l.leased_at IS NOT NULL;
