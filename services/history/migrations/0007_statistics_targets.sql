-- ANALYZE only what the planner uses.
--
-- Autovacuum ANALYZEs tasks, task_transitions and idempotency_keys after a
-- fraction of their rows changed, which on a queue is every few seconds under
-- load. Each run samples many rows and builds statistics for every column,
-- including payloads, results, stacks and JSON policies no query filters on,
-- and for the digest expression of idempotency_keys_hash (a SQL function
-- evaluated once per sampled row; the index is unique, so the planner never
-- needs its statistics). ANALYZE runs on the same cores that answer enqueues
-- (autovacuum runs showed up beside the enqueue ack tail); leaving those out
-- made ANALYZE of idempotency_keys much cheaper (the digest
-- expression was the cost; docs/benchmarks/findings.md). Statistics stay on
-- every column a query filters, joins or sorts on.

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
