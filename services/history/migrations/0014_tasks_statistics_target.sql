-- Coarser statistics for tasks: ANALYZE samples rows in proportion to the
-- largest statistics target.
--
-- Autovacuum analyzes tasks after a small share of change (its table
-- options), which on a queue under sustained enqueues is every few seconds
-- per shard; with the default target each run samples many rows, CPU on the
-- cores that answer enqueues, and the seconds with the worst enqueue acks
-- coincided with those runs. At target 10 a run samples a tenth of them, and
-- the enqueue ack tail shrank (docs/benchmarks/findings.md). Ten most-common
-- values and a 10-bucket histogram still describe what the queries filter on
-- (state's eight values, the tenants and apps of a shard, run_at and
-- finished_at ranges); every plan test passes unchanged. Columns no query
-- filters on keep target 0 (0007).

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
