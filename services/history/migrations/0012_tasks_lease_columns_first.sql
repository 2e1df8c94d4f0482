-- Less WAL per task: `tasks` rebuilt with the columns a lease writes and
-- its end keeps in front of the state.
--
-- An update whose new version stays on its page logs only the bytes between
-- the longest common prefix and suffix of the two versions (migration 0003).
-- Since 0003 the row was: what the create writes, then state, version,
-- attempt, lease_epoch, run_at, updated_at, started_at, finished_at,
-- worker_id, ... So a completion, which changes state, version, updated_at
-- and finished_at and clears the lease's deadlines, also logged the attempt,
-- epoch, run_at, start and worker id lying between them, and a lease logged
-- the unchanged run_at and cancel flag. Now what a lease writes and its end
-- keeps (run_at, cancel_requested, attempt, lease_epoch, started_at,
-- worker_id) comes before state, and after it what
-- every state change rewrites, then the lease's deadlines, then what only an
-- attempt's end, a cancel or a checkpoint writes. A heartbeat still changes
-- only lease_expires_at (a few bytes).
--
-- Column order can only change by rewriting the table (as in 0003): the views
-- over it are dropped and made again unchanged, the rows copied, constraints,
-- indexes and statistics targets recreated under their names. Every column
-- keeps its type, default, NOT NULL and CHECK.

DROP VIEW task_transitions;
DROP VIEW task_attempts;
DROP VIEW timers;

CREATE TABLE tasks_0012 (
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
    non_retryable    text[]      DEFAULT '{}',  -- NULL: none (migration 0011)
    idempotency_key  text,
    schedule_id      text,
    scheduled_time   timestamptz,
    retry_of         uuid,
    created_at       timestamptz NOT NULL,
    -- Rewritten by a lease (or a retry wait), kept by the lease's end
    -- (migration 0012: in the prefix a completion's update does not log).
    run_at           timestamptz NOT NULL,
    cancel_requested boolean     NOT NULL DEFAULT false,
    attempt          integer     NOT NULL DEFAULT 0,
    lease_epoch      bigint      NOT NULL DEFAULT 0,
    started_at       timestamptz,
    worker_id        text,
    -- Rewritten by every state change.
    state            text        NOT NULL,
    version          bigint      NOT NULL DEFAULT 1,
    updated_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    attempt_deadline timestamptz,
    -- Also rewritten by heartbeats (HOT updates). The lease's `lease` timer
    -- (migration 0005): when the firer next looks at the lease. Set by the
    -- lease, moved by the firer, cleared when the lease ends; never touched by
    -- heartbeats.
    lease_expires_at timestamptz,
    lease_check_at   timestamptz,
    -- Written by the end of an attempt, or by cancel requests and checkpoints.
    result           bytea,
    error_class      text,
    error_message    text,
    error_stack      text,
    retried_as       uuid,
    cancel_reason    text,
    kill_at          timestamptz,
    checkpoint       bytea,
    CONSTRAINT tasks_retried_only_when_terminal CHECK (
        retried_as IS NULL OR state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')),
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
    CONSTRAINT tasks_lease_check_iff_leased CHECK ((state = 'LEASED') = (lease_check_at IS NOT NULL))
) WITH (
    -- Room for a second version of every row of a page, so a lease and a
    -- completion stay on the page (compressed WAL); heartbeats stay HOT.
    fillfactor = 50,
    -- Every dispatch leaves a dead tuple in the partial index; vacuum early
    -- because claim latency grows with dead index entries.
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);

INSERT INTO tasks_0012 (
    task_id, tenant_id, app_id, queue, task_type, max_attempts, payload, retry_policy,
    retry_rules, timeouts, non_retryable, idempotency_key, schedule_id, scheduled_time, retry_of, created_at,
    run_at, cancel_requested, attempt, lease_epoch, started_at, worker_id, state, version,
    updated_at, finished_at, attempt_deadline, lease_expires_at, lease_check_at, result, error_class, error_message,
    error_stack, retried_as, cancel_reason, kill_at, checkpoint)
SELECT task_id, tenant_id, app_id, queue, task_type, max_attempts, payload, retry_policy,
       retry_rules, timeouts, non_retryable, idempotency_key, schedule_id, scheduled_time, retry_of, created_at,
       run_at, cancel_requested, attempt, lease_epoch, started_at, worker_id, state, version,
       updated_at, finished_at, attempt_deadline, lease_expires_at, lease_check_at, result, error_class, error_message,
       error_stack, retried_as, cancel_reason, kill_at, checkpoint
  FROM tasks;

DROP TABLE tasks;
ALTER TABLE tasks_0012 RENAME TO tasks;
ALTER TABLE tasks ADD CONSTRAINT tasks_pkey PRIMARY KEY (task_id);

CREATE INDEX tasks_dispatch ON tasks (tenant_id, run_at) WHERE state = 'ENQUEUED';
CREATE INDEX tasks_finished ON tasks (app_id, state, finished_at, task_id)
    WHERE finished_at IS NOT NULL;
CREATE INDEX tasks_lease_check ON tasks (lease_check_at) WHERE state = 'LEASED';

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

CREATE VIEW task_transitions AS
SELECT t.task_id, 1::bigint AS version, NULL::text AS from_state, 'ENQUEUED'::text AS to_state,
       0::bigint AS lease_epoch, t.created_at AS at, 'created'::text AS reason, NULL::integer AS attempt,
       NULL::text AS worker_id, NULL::text AS outcome, NULL::text AS error_class, NULL::text AS error_message,
       NULL::text AS error_stack
  FROM tasks t WHERE t.retry_of IS NULL
UNION ALL
SELECT t.task_id, t.version, 'ENQUEUED', 'LEASED', t.lease_epoch, t.updated_at, 'leased', t.attempt,
       t.worker_id, NULL, NULL, NULL, NULL
  FROM tasks t WHERE t.state = 'LEASED'
UNION ALL
SELECT l.task_id, l.version - 1, 'ENQUEUED', 'LEASED', l.lease_epoch, l.leased_at, 'leased', l.attempt,
       l.worker_id, NULL, NULL, NULL, NULL
  FROM task_log l WHERE l.leased_at IS NOT NULL
UNION ALL
SELECT l.task_id, l.version, l.from_state, l.to_state, l.lease_epoch, l.at, l.reason, NULL, NULL,
       l.outcome, l.error_class, l.error_message, l.error_stack
  FROM task_log l
UNION ALL
SELECT t.task_id, x.version, x.from_state, x.to_state, t.lease_epoch, x.at, x.reason, x.attempt, x.worker_id,
       x.outcome, NULL, NULL, NULL
  FROM tasks t
 CROSS JOIN LATERAL (VALUES
       (2::bigint, 'ENQUEUED'::text, 'LEASED'::text, t.started_at, 'leased'::text, t.attempt, t.worker_id,
        NULL::text),
       (3::bigint, 'LEASED'::text, 'SUCCEEDED'::text, t.finished_at, 'succeeded'::text, NULL::integer, NULL::text,
        'SUCCEEDED'::text)) AS x(version, from_state, to_state, at, reason, attempt, worker_id, outcome)
 WHERE t.state = 'SUCCEEDED' AND t.version = 3
   AND NOT EXISTS (SELECT 1 FROM task_log l WHERE l.task_id = t.task_id AND l.version = 3);

CREATE VIEW task_attempts AS
SELECT t.task_id, t.attempt, t.lease_epoch, t.worker_id, t.updated_at AS started_at,
       NULL::timestamptz AS finished_at, 'RUNNING'::text AS outcome, NULL::text AS error_class,
       NULL::text AS error_message, NULL::text AS error_stack
  FROM tasks t WHERE t.state = 'LEASED'
UNION ALL
SELECT l.task_id, l.attempt, l.lease_epoch, l.worker_id, l.leased_at, l.at, COALESCE(l.outcome, 'RUNNING'),
       l.error_class, l.error_message, l.error_stack
  FROM task_log l WHERE l.leased_at IS NOT NULL
UNION ALL
SELECT t.task_id, t.attempt, t.lease_epoch, t.worker_id, t.started_at, t.finished_at, 'SUCCEEDED',
       NULL, NULL, NULL
  FROM tasks t
 WHERE t.state = 'SUCCEEDED' AND t.version = 3
   AND NOT EXISTS (SELECT 1 FROM task_log l WHERE l.task_id = t.task_id AND l.version = 3);

CREATE VIEW timers AS
SELECT task_id, kind, fire_at, lease_epoch FROM timer_queue
UNION ALL
SELECT task_id, 'lease'::text, lease_check_at, lease_epoch FROM tasks WHERE state = 'LEASED';
