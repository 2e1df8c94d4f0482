-- Less WAL per task: a task in the default queue with the default retry
-- policy and timeouts stores NULL for all three instead of 'default', '{}'
-- and '{}' (bytes of every row: its insert's WAL and the full-page image of
-- its page after each checkpoint).
--
-- NULL means the stored base, as an absent field of a stored policy does
-- (policy.STORED_RETRY_BASE, STORED_START_TO_CLOSE_S) and an
-- empty non_retryable since migration 0011: readers take a NULL queue as
-- 'default' and a NULL policy or timeouts as {}. Rows written before keep
-- their values; both forms read the same.

ALTER TABLE tasks
    ALTER COLUMN queue DROP NOT NULL,
    ALTER COLUMN retry_policy DROP NOT NULL,
    ALTER COLUMN timeouts DROP NOT NULL;

UPDATE tasks
   SET queue = NULLIF(queue, 'default'),
       retry_policy = NULLIF(retry_policy, '{}'::jsonb),
       timeouts = NULLIF(timeouts, '{}'::jsonb)
 WHERE queue = 'default' OR retry_policy = '{}'::jsonb OR timeouts = '{}'::jsonb;
