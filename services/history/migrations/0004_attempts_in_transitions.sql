-- Less WAL per task: an attempt is no longer a row of its own. It was
-- inserted at the lease and rewritten at its end (with a key entry for each,
-- a large part of a task's WAL), although the transition log already holds both
-- moments: the lease row (to LEASED) starts attempt n and the first row
-- leaving LEASED with the same lease_epoch ends it. Those two rows now carry
-- what the attempt row did (the lease: attempt number and worker; the end:
-- outcome and the attempt's error), and `task_attempts` is a view over them
-- with the same columns, so GetTask and every reader keep their query.

ALTER TABLE task_transitions
    ADD COLUMN attempt       integer,
    ADD COLUMN worker_id     text,
    ADD COLUMN outcome       text,
    ADD COLUMN error_class   text,
    ADD COLUMN error_message text,
    ADD COLUMN error_stack   text,
    ADD CONSTRAINT task_transitions_attempt_on_lease CHECK (
        to_state = 'LEASED' OR (attempt IS NULL AND worker_id IS NULL)),
    ADD CONSTRAINT task_transitions_outcome_on_end CHECK (
        outcome IS NULL OR (from_state = 'LEASED' AND outcome IN
            ('SUCCEEDED', 'FAILED', 'LEASE_EXPIRED', 'TIMED_OUT', 'CRASHED', 'CANCELED'))),
    ADD CONSTRAINT task_transitions_error_with_outcome CHECK (outcome IS NOT NULL OR error_class IS NULL);

-- Carry the attempts recorded so far into the log.
UPDATE task_transitions tr
   SET attempt = a.attempt, worker_id = a.worker_id
  FROM task_attempts a
 WHERE tr.to_state = 'LEASED' AND a.task_id = tr.task_id AND a.lease_epoch = tr.lease_epoch;

UPDATE task_transitions tr
   SET outcome = a.outcome, error_class = a.error_class, error_message = a.error_message,
       error_stack = a.error_stack
  FROM task_attempts a
 WHERE a.outcome <> 'RUNNING' AND a.task_id = tr.task_id AND tr.from_state = 'LEASED'
   AND tr.lease_epoch = a.lease_epoch
   AND tr.version = (SELECT min(e.version) FROM task_transitions e
                      WHERE e.task_id = tr.task_id AND e.from_state = 'LEASED' AND e.lease_epoch = tr.lease_epoch);

DROP TABLE task_attempts;

-- One row per lease, as the table had: started by the lease row, ended by
-- the first row leaving LEASED under the same epoch (RUNNING until then).
CREATE VIEW task_attempts AS
SELECT s.task_id, s.attempt, s.lease_epoch, s.worker_id, s.at AS started_at, e.at AS finished_at,
       COALESCE(e.outcome, 'RUNNING') AS outcome, e.error_class, e.error_message, e.error_stack
  FROM task_transitions s
  LEFT JOIN LATERAL (
        SELECT x.at, x.outcome, x.error_class, x.error_message, x.error_stack
          FROM task_transitions x
         WHERE x.task_id = s.task_id AND x.version > s.version AND x.from_state = 'LEASED'
           AND x.lease_epoch = s.lease_epoch
         ORDER BY x.version
         LIMIT 1) e ON true
 WHERE s.to_state = 'LEASED';
