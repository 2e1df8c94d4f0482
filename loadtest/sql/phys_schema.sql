-- The physical reference's tables: the smallest schema a durable job queue
-- can have. Recreated before every measurement so each starts from an empty
-- table with no dead tuples.

-- name: phys_schema_reset
DROP TABLE IF EXISTS phys_commit;
CREATE TABLE phys_commit (
  id bigserial PRIMARY KEY,
  v int NOT NULL,
  at timestamptz NOT NULL DEFAULT now()
);
DROP TABLE IF EXISTS phys_jobs;
CREATE TABLE phys_jobs (
  id bigserial PRIMARY KEY,
  state text NOT NULL DEFAULT 'queued',
  payload jsonb NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL DEFAULT now(),
  started_at timestamptz,
  finished_at timestamptz
);
-- Partial: only runnable rows are indexed, as PERFORMANCE.md asks of the hot table.
CREATE INDEX phys_jobs_queued ON phys_jobs (id) WHERE state = 'queued';

-- name: phys_job_count_done
SELECT count(*) FROM phys_jobs WHERE state = 'done';

-- name: phys_commit_count
SELECT count(*) FROM phys_commit;
