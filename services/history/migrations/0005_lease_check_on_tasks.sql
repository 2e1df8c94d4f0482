-- Less WAL per task: a lease's next check lives on the task row.
--
-- Every lease inserted a `lease` timer row (with its two index entries and a
-- speculative-insert confirmation) and every end of a lease deleted it: a
-- large part of a task's WAL. The lease statement rewrites the task row
-- anyway, so the time of the lease's next check (lease expiry or attempt deadline, later the
-- kill time) is now a column of it, `lease_check_at`, set by the lease, moved
-- by the timer firer when the lease was extended or a cancel started, and
-- cleared by the transition that ends the lease. Heartbeats still never touch
-- it (the check stays lazy, so a heartbeat stays one HOT update). The firer
-- finds due checks through a partial index of leased tasks, which costs the
-- lease one small index entry.
--
-- The other kinds keep their rows, in the table now called timer_queue; the
-- view `timers` lists both as before: every timer_queue row, and a `lease`
-- timer for each leased task at its lease_check_at.

ALTER TABLE tasks ADD COLUMN lease_check_at timestamptz;

UPDATE tasks t
   SET lease_check_at = COALESCE(
         (SELECT m.fire_at FROM timers m WHERE m.task_id = t.task_id AND m.kind = 'lease'),
         LEAST(t.lease_expires_at, CASE WHEN NOT t.cancel_requested THEN t.attempt_deadline END, t.kill_at))
 WHERE t.state = 'LEASED';

ALTER TABLE tasks ADD CONSTRAINT tasks_lease_check_iff_leased CHECK (
    (state = 'LEASED') = (lease_check_at IS NOT NULL));

CREATE INDEX tasks_lease_check ON tasks (lease_check_at) WHERE state = 'LEASED';

DELETE FROM timers WHERE kind = 'lease';
ALTER TABLE timers RENAME TO timer_queue;
ALTER INDEX timers_pkey RENAME TO timer_queue_pkey;
ALTER INDEX timers_fire_at RENAME TO timer_queue_fire_at;
ALTER TABLE timer_queue DROP CONSTRAINT timers_kind_known;
ALTER TABLE timer_queue ADD CONSTRAINT timer_queue_kind_known CHECK (kind IN
    ('delay', 'retry', 'schedule_to_start', 'schedule_to_close'));

CREATE VIEW timers AS
SELECT task_id, kind, fire_at, lease_epoch FROM timer_queue
UNION ALL
SELECT task_id, 'lease'::text, lease_check_at, lease_epoch FROM tasks WHERE state = 'LEASED';
