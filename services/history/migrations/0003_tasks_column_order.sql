-- Less WAL per task: rebuild `tasks` with the columns a task keeps for
-- life first and the ones its state changes rewrite last, on half-full pages.
--
-- Postgres logs an UPDATE whose new version lands on the old version's page
-- as only the bytes between the longest common prefix and suffix of the two
-- versions. With the payload, policies and names first, a lease or a
-- completion logs the row's short tail instead of the whole row, and a
-- heartbeat (lease_expires_at is the last column) logs a few bytes. That needs
-- the new version to fit on the old one's page: a lease takes every ready row
-- of a page in one transaction, so each page keeps room for a second version
-- of each of its rows (fillfactor 50; the old versions are pruned before the
-- completion needs the room again). An update that has to leave its page also
-- costs a LOCK record and no compression, so both matter.
--
-- Column order can only change by rewriting the table: a new table, the rows
-- copied, the old one dropped, constraints and indexes recreated under their
-- names. Every column keeps its type, default, NOT NULL and CHECK.

CREATE TABLE tasks_0003 (
    -- Written once, by the create.
    task_id          uuid        NOT NULL,
    tenant_id        text        COLLATE "C" NOT NULL,
    app_id           text        NOT NULL,
    queue            text        NOT NULL,
    task_type        text        NOT NULL,
    max_attempts     integer     NOT NULL,
    payload          bytea       NOT NULL,
    retry_policy     jsonb       NOT NULL,
    retry_rules      jsonb,
    timeouts         jsonb       NOT NULL,
    non_retryable    text[]      NOT NULL DEFAULT '{}',
    idempotency_key  text,
    schedule_id      text,
    scheduled_time   timestamptz,
    retry_of         uuid,
    created_at       timestamptz NOT NULL,
    -- Rewritten by state changes.
    state            text        NOT NULL,
    version          bigint      NOT NULL DEFAULT 1,
    attempt          integer     NOT NULL DEFAULT 0,
    lease_epoch      bigint      NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    worker_id        text,
    attempt_deadline timestamptz,
    result           bytea,
    error_class      text,
    error_message    text,
    error_stack      text,
    retried_as       uuid,
    -- Also rewritten by heartbeats and cancel requests (HOT updates).
    cancel_requested boolean     NOT NULL DEFAULT false,
    cancel_reason    text,
    kill_at          timestamptz,
    checkpoint       bytea,
    lease_expires_at timestamptz,
    CONSTRAINT tasks_state_known CHECK (state IN
        ('ENQUEUED', 'LEASED', 'RETRY_WAIT', 'SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')),
    CONSTRAINT tasks_terminal_iff_finished CHECK (
        (state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')) = (finished_at IS NOT NULL)),
    CONSTRAINT tasks_leased_has_lease CHECK (
        state <> 'LEASED' OR (lease_expires_at IS NOT NULL AND worker_id IS NOT NULL)),
    CONSTRAINT tasks_cancel_reason_known CHECK (
        cancel_reason IS NULL OR cancel_reason IN ('user', 'start_to_close', 'schedule_to_close')),
    CONSTRAINT tasks_kill_needs_cancel CHECK (kill_at IS NULL OR cancel_requested),
    CONSTRAINT tasks_counters_valid CHECK (
        version >= 1 AND attempt >= 0 AND max_attempts >= 1 AND lease_epoch >= 0),
    CONSTRAINT tasks_retried_only_when_terminal CHECK (
        retried_as IS NULL OR state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED'))
) WITH (
    -- Room for a second version of every row of a page (see above); heartbeats stay HOT.
    fillfactor = 50,
    -- Every dispatch leaves a dead tuple in the partial index; vacuum early
    -- because claim latency grows with dead index entries.
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);

INSERT INTO tasks_0003 (
    task_id, tenant_id, app_id, queue, task_type, max_attempts, payload, retry_policy, retry_rules, timeouts,
    non_retryable, idempotency_key, schedule_id, scheduled_time, retry_of, created_at, state, version, attempt,
    lease_epoch, run_at, updated_at, started_at, finished_at, worker_id, attempt_deadline, result, error_class,
    error_message, error_stack, retried_as, cancel_requested, cancel_reason, kill_at, checkpoint, lease_expires_at)
SELECT task_id, tenant_id, app_id, queue, task_type, max_attempts, payload, retry_policy, retry_rules, timeouts,
       non_retryable, idempotency_key, schedule_id, scheduled_time, retry_of, created_at, state, version, attempt,
       lease_epoch, run_at, updated_at, started_at, finished_at, worker_id, attempt_deadline, result, error_class,
       error_message, error_stack, retried_as, cancel_requested, cancel_reason, kill_at, checkpoint, lease_expires_at
  FROM tasks;

DROP TABLE tasks;
ALTER TABLE tasks_0003 RENAME TO tasks;
ALTER TABLE tasks ADD CONSTRAINT tasks_pkey PRIMARY KEY (task_id);

-- The same two indexes as before (0001, 0002).
CREATE INDEX tasks_dispatch ON tasks (tenant_id, run_at) WHERE state = 'ENQUEUED';
CREATE INDEX tasks_finished ON tasks (tenant_id, app_id, state, finished_at, task_id)
    WHERE finished_at IS NOT NULL;
