-- Less WAL per task: a task without non-retryable error classes stores
-- NULL instead of an empty array (bytes of every row, its insert's WAL and
-- the full-page images of its page). Readers take NULL as no classes.
ALTER TABLE tasks ALTER COLUMN non_retryable DROP NOT NULL;
