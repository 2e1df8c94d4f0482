-- Coarser statistics for tasks: ANALYZE samples 300 x the largest target rows.
--
-- Autovacuum analyzes tasks after 2 % of change (its table options), which on
-- a queue under sustained enqueues is every few seconds per shard; with the
-- default target (100) each run samples 30,000 rows: 76-90 ms of CPU on a
-- 150k-row shard (2-core bench machine), on the cores that answer enqueues.
-- The seconds with the worst enqueue acks coincided with those runs
-- (docs/benchmarks/findings.md, session 15). At target 10 a run samples 3,000
-- rows, 8-10 ms; an open loop of single enqueues at 2,400/s: ack p99 85-124 ms
-- -> 38-57 ms (interleaved pairs). Ten most-common values and a 10-bucket
-- histogram still describe what the queries filter on (state's eight values,
-- the tenants and apps of a shard, run_at and finished_at ranges); every plan
-- test passes unchanged. Columns no query filters on keep target 0 (0007).

ALTER TABLE tasks
    ALTER COLUMN task_id SET STATISTICS 10,
    ALTER COLUMN tenant_id SET STATISTICS 10,
    ALTER COLUMN app_id SET STATISTICS 10,
    ALTER COLUMN queue SET STATISTICS 10,
    ALTER COLUMN task_type SET STATISTICS 10,
    ALTER COLUMN max_attempts SET STATISTICS 10,
    ALTER COLUMN schedule_id SET STATISTICS 10,
    ALTER COLUMN scheduled_time SET STATISTICS 10,
    ALTER COLUMN retry_of SET STATISTICS 10,
    ALTER COLUMN created_at SET STATISTICS 10,
    ALTER COLUMN run_at SET STATISTICS 10,
    ALTER COLUMN cancel_requested SET STATISTICS 10,
    ALTER COLUMN attempt SET STATISTICS 10,
    ALTER COLUMN lease_epoch SET STATISTICS 10,
    ALTER COLUMN started_at SET STATISTICS 10,
    ALTER COLUMN worker_id SET STATISTICS 10,
    ALTER COLUMN state SET STATISTICS 10,
    ALTER COLUMN version SET STATISTICS 10,
    ALTER COLUMN updated_at SET STATISTICS 10,
    ALTER COLUMN finished_at SET STATISTICS 10,
    ALTER COLUMN attempt_deadline SET STATISTICS 10,
    ALTER COLUMN lease_expires_at SET STATISTICS 10,
    ALTER COLUMN lease_check_at SET STATISTICS 10,
    ALTER COLUMN error_class SET STATISTICS 10,
    ALTER COLUMN retried_as SET STATISTICS 10,
    ALTER COLUMN kill_at SET STATISTICS 10;
