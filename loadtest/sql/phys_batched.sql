-- PHYS_batched: a minimal dispatcher that leases and completes 100 rows per
-- commit (one commit to claim a batch, one to complete it).

-- name: phys_job_preload
INSERT INTO phys_jobs (payload) SELECT '{}'::jsonb FROM generate_series(1, $1::int);

-- name: phys_job_claim_batch
UPDATE phys_jobs SET state = 'running', started_at = now()
WHERE id IN (SELECT id FROM phys_jobs WHERE state = 'queued' ORDER BY id LIMIT $1::int FOR UPDATE SKIP LOCKED)
RETURNING id;

-- name: phys_job_complete_batch
UPDATE phys_jobs SET state = 'done', finished_at = now()
WHERE id = ANY($1::bigint[]) AND state = 'running';
