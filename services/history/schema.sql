-- The history shard schema as it stands after every migration in
-- services/history/migrations/. Read this to know the schema; change it only
-- together with a new migration.
-- tests/integration/history/test_history_schema.py migrates one database, loads this
-- file into another, and requires their catalogs to match.
CREATE TABLE tasks (
    -- Written once, by the create (migrations 0003 and 0012: the columns
    -- a task keeps for life first, so an update that stays on its page logs
    -- only the middle that changed).
    task_id          uuid        PRIMARY KEY,
    tenant_id        text        COLLATE "C" NOT NULL,
    app_id           text        NOT NULL,
    queue            text,                      -- NULL: 'default' (migration 0013)
    task_type        text        NOT NULL,
    max_attempts     integer     NOT NULL,
    payload          bytea       NOT NULL,
    retry_policy     jsonb,                     -- NULL: {}, the stored base (0013)
    retry_rules      jsonb,
    timeouts         jsonb,                     -- NULL: {} (0013)
    non_retryable    text[]      DEFAULT '{}',  -- NULL: none (migration 0011)
    idempotency_key  text,
    schedule_id      text,
    scheduled_time   timestamptz,
    retry_of         uuid,
    created_at       timestamptz NOT NULL DEFAULT now(),  -- (defaults: migration 0015)
    -- Rewritten by a lease (or a retry wait), kept by the lease's end
    -- (migration 0012: in the prefix a completion's update does not log).
    run_at           timestamptz NOT NULL DEFAULT now(),
    cancel_requested boolean     NOT NULL DEFAULT false,
    attempt          integer     NOT NULL DEFAULT 0,
    lease_epoch      bigint      NOT NULL DEFAULT 0,
    started_at       timestamptz,
    worker_id        text,
    -- Rewritten by every state change.
    state            text        NOT NULL,
    version          bigint      NOT NULL DEFAULT 1,
    updated_at       timestamptz NOT NULL DEFAULT now(),
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
    -- A fan-out child's parent run (migration 0017); NULL for every other task.
    parent_id        uuid,
    CONSTRAINT tasks_retried_only_when_terminal CHECK (
        retried_as IS NULL OR state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')),
    CONSTRAINT tasks_state_known CHECK (state IN
        ('ENQUEUED', 'LEASED', 'RETRY_WAIT', 'SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED', 'WAITING')),
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

-- Dispatch: ready work per tenant. Partial, so finished and running tasks
-- cost it nothing, and ordered (tenant_id, run_at) so the tenant skip scan
-- and each tenant's oldest-first claim are both index range reads.
CREATE INDEX tasks_dispatch ON tasks (tenant_id, run_at) WHERE state = 'ENQUEUED';

-- Search over finished tasks (the dead-letter search is state = 'FAILED'),
-- newest first by (finished_at, task_id). Partial: written once, when a task
-- becomes terminal, so enqueue, lease and heartbeat pay nothing for it. Keyed
-- by app alone (migration 0009): an app id is unique platform-wide and names
-- one tenant; the queries still filter on tenant_id.
CREATE INDEX tasks_finished ON tasks (app_id, state, finished_at, task_id)
    WHERE finished_at IS NOT NULL;

-- Due lease checks for the timer firer (migration 0005): one entry per
-- leased task, written by the lease (a non-HOT update anyway).
CREATE INDEX tasks_lease_check ON tasks (lease_check_at) WHERE state = 'LEASED';

-- The transition log (migration 0008): one row per logged state change,
-- written in the same transaction. version is consecutive from 1 per task;
-- from_state is NULL only for a create row. Only what no other row records
-- is logged: a task's create is implied by its row (only a bulk retry's new
-- task, retry_of set, logs one, its reason naming the operation), and a lease
-- (ENQUEUED -> LEASED at version v) is logged with the row that ends it
-- (version v + 1, leaving LEASED): leased_at, attempt and worker_id, next to
-- the attempt's outcome and error. Until then the task row holds them. A
-- task that succeeds at its first lease logs nothing (migration 0010): its
-- row says all of it (version 3 and SUCCEEDED imply create -> lease ->
-- success).
CREATE TABLE task_log (
    task_id       uuid        NOT NULL,
    version       bigint      NOT NULL,
    from_state    text,
    to_state      text        NOT NULL,
    lease_epoch   bigint      NOT NULL,
    at            timestamptz NOT NULL,
    reason        text        NOT NULL,
    attempt       integer,
    worker_id     text,
    outcome       text,
    error_class   text,
    error_message text,
    error_stack   text,
    leased_at     timestamptz,
    CONSTRAINT task_log_pkey PRIMARY KEY (task_id, version),
    CONSTRAINT task_log_create_first CHECK ((from_state IS NULL) = (version = 1)),
    CONSTRAINT task_log_outcome_on_end CHECK (
        outcome IS NULL OR (from_state = 'LEASED' AND outcome IN
            ('SUCCEEDED', 'FAILED', 'LEASE_EXPIRED', 'TIMED_OUT', 'CRASHED', 'CANCELED', 'SUSPENDED'))),
    CONSTRAINT task_log_error_with_outcome CHECK (outcome IS NOT NULL OR error_class IS NULL),
    CONSTRAINT task_log_no_lease_rows CHECK (to_state <> 'LEASED'),
    CONSTRAINT task_log_lease_with_its_end CHECK (
        (from_state IS NOT DISTINCT FROM 'LEASED') = (leased_at IS NOT NULL)
        AND (leased_at IS NULL) = (attempt IS NULL)
        AND (leased_at IS NULL) = (worker_id IS NULL))
) WITH (
    -- Insert-only: vacuum for the visibility map, not for dead tuples.
    autovacuum_vacuum_insert_scale_factor = 0.1
);

-- Every transition of every task, as one log: the implied create row, the
-- running lease from the task row, a closed lease from the row that ended
-- it, every logged row, and (migration 0010) the lease and success of a task
-- that succeeded at its first lease (version 3, SUCCEEDED: only create ->
-- lease -> success leads there), read off its row unless the log holds a
-- version 3. Readers filter by task_id, which each part answers from a
-- primary key.
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

-- One row per lease: the running one from the task row, each closed one from
-- the row that ended it, a first lease's success from the task row.
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

-- One timer mechanism for delays, retry backoff, lease expiry and timeouts.
-- At most one timer of each kind per task; lease_epoch fences a timer to the
-- lease (or retry wait) it was set for. Since migration 0005 the `lease`
-- timer is the leased task's lease_check_at; the other kinds are rows here.
CREATE TABLE timer_queue (
    task_id     uuid        NOT NULL,
    kind        text        NOT NULL,
    fire_at     timestamptz NOT NULL,
    lease_epoch bigint      NOT NULL DEFAULT 0,
    CONSTRAINT timer_queue_pkey PRIMARY KEY (task_id, kind),
    CONSTRAINT timer_queue_kind_known CHECK (kind IN
        ('delay', 'retry', 'schedule_to_start', 'schedule_to_close', 'wake'))
) WITH (
    fillfactor = 90,
    -- The smallest, hottest table: rows churn.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 200,
    autovacuum_vacuum_cost_delay = 0
);

CREATE INDEX timer_queue_fire_at ON timer_queue (fire_at);

-- Every pending timer as one list: the timer_queue rows and a `lease` timer
-- per leased task at its lease_check_at.
CREATE VIEW timers AS
SELECT task_id, kind, fire_at, lease_epoch FROM timer_queue
UNION ALL
SELECT task_id, 'lease'::text, lease_check_at, lease_epoch FROM tasks WHERE state = 'LEASED';

-- Enqueue idempotency: unique per (tenant, app, key). A key is honoured
-- until expires_at; after that the same key may name a new task.
CREATE TABLE idempotency_keys (
    tenant_id   text        NOT NULL,
    app_id      text        NOT NULL,
    key         text        NOT NULL,
    task_id     uuid        NOT NULL,
    fingerprint text        NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
) WITH (
    autovacuum_vacuum_scale_factor = 0.05
);

-- Unique by a 16-byte digest of (tenant, app, key) (migration 0006): the
-- first 128 bits of sha256 over the length-prefixed three. Reads compare the
-- columns too, so a collision could only refuse a key.
CREATE FUNCTION idempotency_key_hash(tenant_id text, app_id text, key text) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN encode(substr(sha256(convert_to(length(tenant_id)::text || ':' || tenant_id || length(app_id)::text
                                           || ':' || app_id || key, 'UTF8')), 1, 16), 'hex')::uuid;

CREATE UNIQUE INDEX idempotency_keys_hash ON idempotency_keys (idempotency_key_hash(tenant_id, app_id, key));

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

-- ANALYZE only what the planner uses (migration 0007): no statistics for
-- payloads, results, errors, policies and key text no query filters on, nor
-- for the unique digest expression (one SQL function call per sampled row).
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
    ALTER COLUMN checkpoint SET STATISTICS 0,
    ALTER COLUMN parent_id SET STATISTICS 0;
ALTER TABLE task_log
    ALTER COLUMN error_message SET STATISTICS 0,
    ALTER COLUMN error_stack SET STATISTICS 0;
ALTER TABLE idempotency_keys
    ALTER COLUMN key SET STATISTICS 0,
    ALTER COLUMN fingerprint SET STATISTICS 0;
ALTER INDEX idempotency_keys_hash ALTER COLUMN 1 SET STATISTICS 0;
-- Migration 0014: the columns tasks keeps statistics on, at target 10 (ANALYZE samples 3,000 rows).
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

-- One row per checkpoint call of a run: the Nth ctx.step / ctx.version /
-- ctx.sleep / ctx.wait_for_event of the code is position N. RUNNING is a
-- claim under lease_epoch (or a sleep or wait not over); COMPLETED holds the
-- result; FAILED the error (fatal: never run again).
CREATE TABLE workflow_steps (
    workflow_id   uuid        NOT NULL,
    position      integer     NOT NULL,
    name          text        NOT NULL,
    kind          text        NOT NULL,
    state         text        NOT NULL,
    lease_epoch   bigint      NOT NULL,
    attempt       integer     NOT NULL,
    result        bytea,
    error_class   text,
    error_message text,
    error_stack   text,
    fatal         boolean     NOT NULL DEFAULT false,
    -- A sleep's end, a wait's timeout (NULL: a wait without one).
    wake_at       timestamptz,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    -- PARALLEL/CHILD (migration 0017): how many children, and what a failed one does.
    child_count   integer,
    on_failure    text,
    CONSTRAINT workflow_steps_pkey PRIMARY KEY (workflow_id, position),
    CONSTRAINT workflow_steps_position_valid CHECK (position >= 0 AND attempt >= 1),
    CONSTRAINT workflow_steps_kind_known CHECK (kind IN
        ('STEP', 'VERSION', 'SLEEP', 'WAIT', 'PARALLEL', 'CHILD', 'ON_CANCEL', 'COMPENSATE')),
    CONSTRAINT workflow_steps_fanout_has_children CHECK (
        (kind IN ('PARALLEL', 'CHILD')) = (child_count IS NOT NULL)
        AND (on_failure IS NULL OR on_failure IN ('COLLECT', 'FAIL_FAST'))),
    CONSTRAINT workflow_steps_state_known CHECK (state IN ('RUNNING', 'COMPLETED', 'FAILED')),
    CONSTRAINT workflow_steps_running_iff_open CHECK ((state = 'RUNNING') = (finished_at IS NULL)),
    CONSTRAINT workflow_steps_error_iff_failed CHECK ((state = 'FAILED') = (error_class IS NOT NULL))
);

-- The open waits, for a broadcast's probe by (tenant, event name). A wait
-- leaves this table when an event or its timeout completes its step.
CREATE TABLE workflow_waits (
    workflow_id uuid    NOT NULL,
    position    integer NOT NULL,
    tenant_id   text    NOT NULL,
    name        text    NOT NULL,
    -- The fields an event's data must contain (jsonb containment).
    match       jsonb   NOT NULL,
    CONSTRAINT workflow_waits_pkey PRIMARY KEY (workflow_id, position)
);

CREATE INDEX workflow_waits_by_name ON workflow_waits (tenant_id, name);

-- Events sent to one run, kept until a wait of that name (and match)
-- consumes one, oldest first.
CREATE TABLE workflow_inbox (
    workflow_id  uuid        NOT NULL,
    seq          bigint      GENERATED ALWAYS AS IDENTITY,
    name         text        NOT NULL,
    data         jsonb       NOT NULL,
    received_at  timestamptz NOT NULL,
    -- The wait (its position) that consumed the event.
    consumed_by  integer,
    consumed_at  timestamptz,
    -- SendWorkflowEvent.event_id (migration 0017): a resent event is kept once.
    event_id     text,
    CONSTRAINT workflow_inbox_pkey PRIMARY KEY (workflow_id, seq),
    CONSTRAINT workflow_inbox_consumed_together CHECK ((consumed_by IS NULL) = (consumed_at IS NULL))
);

-- The barrier of a fan-out: one row per stripe (children index mod K) with
-- the children of that stripe not yet ended, and a top row (stripe -1) with
-- the stripes not yet at zero. Spreading the decrements over K rows keeps
-- concurrent children's ends from queueing on one row lock.
CREATE TABLE workflow_barriers (
    workflow_id uuid    NOT NULL,
    position    integer NOT NULL,
    stripe      integer NOT NULL,
    remaining   integer NOT NULL,
    CONSTRAINT workflow_barriers_pkey PRIMARY KEY (workflow_id, position, stripe),
    CONSTRAINT workflow_barriers_remaining_valid CHECK (remaining >= 0 AND stripe >= -1)
);

-- On the child's shard: which fan-out a child belongs to.
CREATE TABLE workflow_children (
    child_id    uuid    NOT NULL,
    parent_id   uuid    NOT NULL,
    position    integer NOT NULL,
    child_index integer NOT NULL,
    CONSTRAINT workflow_children_pkey PRIMARY KEY (child_id)
);

-- On the child's shard: a child's end not yet recorded on its parent's shard.
CREATE TABLE workflow_child_outbox (
    child_id      uuid        NOT NULL,
    parent_id     uuid        NOT NULL,
    position      integer     NOT NULL,
    child_index   integer     NOT NULL,
    state         text        NOT NULL,
    result        bytea,
    error_class   text,
    error_message text,
    ended_at      timestamptz NOT NULL,
    CONSTRAINT workflow_child_outbox_pkey PRIMARY KEY (child_id)
);

-- On the parent's shard: each child's end, recorded once (the key dedupes a
-- resent delivery), with what the step's result gives back.
CREATE TABLE workflow_child_done (
    workflow_id   uuid        NOT NULL,
    position      integer     NOT NULL,
    child_index   integer     NOT NULL,
    child_id      uuid        NOT NULL,
    state         text        NOT NULL,
    result        bytea,
    error_class   text,
    error_message text,
    ended_at      timestamptz NOT NULL,
    CONSTRAINT workflow_child_done_pkey PRIMARY KEY (workflow_id, position, child_index)
);

CREATE UNIQUE INDEX workflow_inbox_event_id ON workflow_inbox (workflow_id, event_id)
    WHERE event_id IS NOT NULL;

-- A cancelled run that registered compensations (migration 0018): its cancel
-- is kept until the activation that runs them ends it CANCELED.
CREATE TABLE workflow_cancels (
    workflow_id  uuid        NOT NULL,
    requested_at timestamptz NOT NULL,
    reason       text        NOT NULL,
    CONSTRAINT workflow_cancels_pkey PRIMARY KEY (workflow_id)
);

-- A fan-out's pending cancel cascade (its children cancelled in batches by
-- the fan-out loop), on the parent's shard: next_index is the cursor, the
-- next child to cancel; the row goes at the fan-out's end. (Slice 2 kept
-- these as marker rows in workflow_child_outbox, state 'CASCADE'.)
CREATE TABLE workflow_cascades (
    workflow_id  uuid        NOT NULL,
    position     integer     NOT NULL,
    next_index   integer     NOT NULL,
    opened_at    timestamptz NOT NULL,
    CONSTRAINT workflow_cascades_pkey PRIMARY KEY (workflow_id, position)
);
