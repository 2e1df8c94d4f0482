-- Named queries on task_attempts and task_transitions, views since
-- migrations 0004 and 0008: a running attempt is read off the task row, a
-- closed one off the log row that ended it (which also logs its lease);
-- both are written with the task's state change, in tasks.sql.

-- name: attempt_list
-- A task's attempts, oldest first.
SELECT attempt, lease_epoch, worker_id, started_at, finished_at, outcome,
       error_class, error_message, error_stack
  FROM task_attempts WHERE task_id = $1::uuid ORDER BY attempt

-- name: transition_list
-- A task's transition log in version order (tests and the fault checker).
SELECT version, from_state, to_state, lease_epoch, at, reason
  FROM task_transitions WHERE task_id = $1::uuid ORDER BY version
