-- Retry rules per error class, schedule fields, checkpoints, bulk
-- retry links, the dead-letter search index, and bulk operations.
--
-- Every new tasks column is nullable without a default, so ADD COLUMN is a
-- catalog change only (no table rewrite), and none is indexed, so heartbeats
-- that store a checkpoint stay HOT updates.

ALTER TABLE tasks
    -- {error_class: {non_retryable, max_attempts, base_s, factor, cap_s, jitter}};
    -- NULL when the policy has no rules. Unset fields inherit from retry_policy.
    ADD COLUMN retry_rules    jsonb,
    -- Set when a schedule fired this task (cron service).
    ADD COLUMN schedule_id    text,
    ADD COLUMN scheduled_time timestamptz,
    -- The last ctx.checkpoint() value (JSON text), written under the lease fence.
    ADD COLUMN checkpoint     bytea,
    -- Bulk retry links: the new task points back with retry_of; the original,
    -- which stays terminal, points forward with retried_as.
    ADD COLUMN retry_of       uuid,
    ADD COLUMN retried_as     uuid,
    ADD CONSTRAINT tasks_retried_only_when_terminal CHECK (
        retried_as IS NULL OR state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED'));

-- Search over finished tasks (the dead-letter search is state = 'FAILED'),
-- newest first by (finished_at, task_id). Partial: an entry is written once,
-- when a task becomes terminal (already a non-HOT update), so enqueue, lease
-- and heartbeat pay nothing for it.
CREATE INDEX tasks_finished ON tasks (tenant_id, app_id, state, finished_at, task_id)
    WHERE finished_at IS NOT NULL;

-- One row per shard part of a bulk operation. The cursor columns are the
-- position of the last task processed in the operation's scan order, and
-- are committed with each batch, so a crashed operation resumes there.
CREATE TABLE bulk_operations (
    operation_id          text        PRIMARY KEY,
    tenant_id             text        COLLATE "C" NOT NULL,
    app_id                text        NOT NULL,
    kind                  text        NOT NULL,
    filter                jsonb       NOT NULL,
    registered_task_types text[]      NOT NULL DEFAULT '{}',
    state                 text        NOT NULL,
    matched               bigint      NOT NULL DEFAULT 0,
    processed             bigint      NOT NULL DEFAULT 0,
    succeeded             bigint      NOT NULL DEFAULT 0,
    failed                bigint      NOT NULL DEFAULT 0,
    skipped               bigint      NOT NULL DEFAULT 0,
    -- Tasks reaching the filter after this instant are not part of the operation.
    bound_at              timestamptz NOT NULL,
    cursor_state          text,
    cursor_time           timestamptz,
    cursor_task_id        uuid,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    finished_at           timestamptz,
    CONSTRAINT bulk_operations_kind_known CHECK (kind IN ('RETRY', 'CANCEL')),
    CONSTRAINT bulk_operations_state_known CHECK (state IN ('RUNNING', 'SUCCEEDED', 'CANCELED')),
    CONSTRAINT bulk_operations_running_iff_open CHECK ((state = 'RUNNING') = (finished_at IS NULL)),
    CONSTRAINT bulk_operations_counts_add_up CHECK (
        processed = succeeded + failed + skipped AND least(matched, processed, succeeded, failed, skipped) >= 0)
);

-- The bulk loop's work list.
CREATE INDEX bulk_operations_running ON bulk_operations (created_at) WHERE state = 'RUNNING';

-- The first failures of each operation part (at most 1,000 are kept; the
-- failed counter keeps counting).
CREATE TABLE bulk_operation_failures (
    operation_id text        NOT NULL,
    seq          integer     NOT NULL,
    task_id      uuid        NOT NULL,
    reason       text        NOT NULL,
    at           timestamptz NOT NULL,
    PRIMARY KEY (operation_id, seq)
);
