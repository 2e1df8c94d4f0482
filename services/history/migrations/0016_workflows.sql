-- Workflows (issue 24, docs/workflows.md). A run is a task of a workflow
-- handler: it is leased, retried and timed out as any task, and between
-- activations it is WAITING (a sleep, a wait for an event), woken by a
-- `wake` timer at the sleep's end or the wait's timeout, or by the event.
-- Its progress is the step log, one row per checkpoint call, by position.

ALTER TABLE tasks DROP CONSTRAINT tasks_state_known,
    ADD CONSTRAINT tasks_state_known CHECK (state IN
        ('ENQUEUED', 'LEASED', 'RETRY_WAIT', 'SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED', 'WAITING'));

ALTER TABLE task_log DROP CONSTRAINT task_log_outcome_on_end,
    ADD CONSTRAINT task_log_outcome_on_end CHECK (
        outcome IS NULL OR (from_state = 'LEASED' AND outcome IN
            ('SUCCEEDED', 'FAILED', 'LEASE_EXPIRED', 'TIMED_OUT', 'CRASHED', 'CANCELED', 'SUSPENDED')));

ALTER TABLE timer_queue DROP CONSTRAINT timer_queue_kind_known,
    ADD CONSTRAINT timer_queue_kind_known CHECK (kind IN
        ('delay', 'retry', 'schedule_to_start', 'schedule_to_close', 'wake'));

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
    CONSTRAINT workflow_steps_pkey PRIMARY KEY (workflow_id, position),
    CONSTRAINT workflow_steps_position_valid CHECK (position >= 0 AND attempt >= 1),
    CONSTRAINT workflow_steps_kind_known CHECK (kind IN ('STEP', 'VERSION', 'SLEEP', 'WAIT')),
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
    CONSTRAINT workflow_inbox_pkey PRIMARY KEY (workflow_id, seq),
    CONSTRAINT workflow_inbox_consumed_together CHECK ((consumed_by IS NULL) = (consumed_at IS NULL))
);
