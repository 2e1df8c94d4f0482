-- ANALYZE only what the planner uses.
--
-- Autovacuum ANALYZEs tasks, task_transitions and idempotency_keys every
-- ~10 % of change, which on a queue is every few seconds under load. Each
-- run samples up to 30,000 rows and builds statistics for every column,
-- including payloads, results, stacks and JSON policies no query filters on,
-- and for the digest expression of idempotency_keys_hash (a SQL function
-- evaluated once per sampled row; the index is unique, so the planner never
-- needs its statistics). Measured on a 10k-row shard (2-core bench machine),
-- on the same cores that answer enqueues (autovacuum runs showed up beside
-- the enqueue ack tail, docs/benchmarks/findings.md): ANALYZE
-- idempotency_keys 54 ms -> 11-13 ms (the digest expression was the cost);
-- ANALYZE tasks 34-41 ms both ways (within noise: its sample reads dominate).
-- Statistics stay on every column a query filters, joins or sorts on.

ALTER TABLE tasks
    ALTER COLUMN payload SET STATISTICS 0,
    ALTER COLUMN retry_policy SET STATISTICS 0,
    ALTER COLUMN retry_rules SET STATISTICS 0,
    ALTER COLUMN timeouts SET STATISTICS 0,
    ALTER COLUMN non_retryable SET STATISTICS 0,
    ALTER COLUMN idempotency_key SET STATISTICS 0,
    ALTER COLUMN result SET STATISTICS 0,
    ALTER COLUMN error_message SET STATISTICS 0,
    ALTER COLUMN error_stack SET STATISTICS 0,
    ALTER COLUMN cancel_reason SET STATISTICS 0,
    ALTER COLUMN checkpoint SET STATISTICS 0;

ALTER TABLE task_transitions
    ALTER COLUMN error_message SET STATISTICS 0,
    ALTER COLUMN error_stack SET STATISTICS 0;

ALTER TABLE idempotency_keys
    ALTER COLUMN key SET STATISTICS 0,
    ALTER COLUMN fingerprint SET STATISTICS 0;

ALTER INDEX idempotency_keys_hash ALTER COLUMN 1 SET STATISTICS 0;
