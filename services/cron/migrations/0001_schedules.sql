-- The cron service's database (ratchet_cron): schedules and the slots they
-- fired. The cron service is the only writer. No foreign keys: one writer,
-- and every change that spans both tables is one transaction that locks the
-- schedule row first.

CREATE TABLE schedules (
    schedule_id       uuid PRIMARY KEY,
    tenant_id         text COLLATE "C" NOT NULL,
    app_id            text COLLATE "C" NOT NULL,
    cron              text NOT NULL,
    timezone          text NOT NULL,
    -- ratchet.api.schedules.v1.TaskTemplate as proto JSON (field names as in the proto).
    task_template     jsonb NOT NULL,
    overlap_policy    text NOT NULL,
    catchup_window_ms bigint NOT NULL,
    state             text NOT NULL,
    -- The one materialised occurrence; NULL exactly while paused.
    next_fire_time    timestamptz,
    last_fire_time    timestamptz,
    last_task_id      text,
    request_id        text,
    -- sha256 of the create request without request_id: tells a retry from a
    -- different request reusing the id.
    fingerprint       text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT schedules_state_known CHECK (state IN ('ACTIVE', 'PAUSED')),
    CONSTRAINT schedules_policy_known CHECK (overlap_policy IN ('ALLOW', 'SKIP', 'CANCEL_PREVIOUS', 'BUFFER_ONE')),
    CONSTRAINT schedules_catchup_not_negative CHECK (catchup_window_ms >= 0),
    CONSTRAINT schedules_active_iff_next CHECK ((state = 'ACTIVE') = (next_fire_time IS NOT NULL)),
    CONSTRAINT schedules_last_fire_pair CHECK ((last_task_id IS NULL) = (last_fire_time IS NULL))
);

-- CreateSchedule is safe to retry per caller with the same request_id.
CREATE UNIQUE INDEX schedules_request_id ON schedules (tenant_id, app_id, request_id)
    WHERE request_id IS NOT NULL;
-- The fire loop's only scan: due active schedules.
CREATE INDEX schedules_due ON schedules (next_fire_time) WHERE state = 'ACTIVE';
-- ListSchedules pages by (created_at, schedule_id) within an app.
CREATE INDEX schedules_by_app ON schedules (tenant_id, app_id, created_at, schedule_id);

-- One row per slot a schedule fired (or decided not to). The primary key is
-- the UNIQUE (schedule_id, slot) that makes a double firing impossible.
--   PENDING  recorded, overlap decision not made yet
--   BUFFERED buffer_one: waits for the previous task to finish
--   SENDING  decided to fire: EnqueueScheduled is (re)sent until acknowledged
--   FIRED    enqueued; task_id set
--   SKIPPED  not fired (overlap policy, full buffer, pause); reason set
--   FAILED   the gateway refused the task for good; reason set
CREATE TABLE schedule_slots (
    schedule_id     uuid NOT NULL,
    slot            timestamptz NOT NULL,
    kind            text NOT NULL,
    state           text NOT NULL,
    task_id         text,
    -- cancel_previous: the task to cancel before this slot's enqueue.
    cancel_task_id  text,
    reason          text,
    attempts        int NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at     timestamptz,
    PRIMARY KEY (schedule_id, slot),
    CONSTRAINT schedule_slots_kind_known CHECK (kind IN ('CRON', 'CATCHUP', 'TRIGGER')),
    CONSTRAINT schedule_slots_state_known
        CHECK (state IN ('PENDING', 'BUFFERED', 'SENDING', 'FIRED', 'SKIPPED', 'FAILED')),
    CONSTRAINT schedule_slots_fired_iff_task CHECK ((state = 'FIRED') = (task_id IS NOT NULL)),
    CONSTRAINT schedule_slots_open_iff_unfinished
        CHECK ((state IN ('PENDING', 'BUFFERED', 'SENDING')) = (finished_at IS NULL))
);

-- Open slots are few; these keep the fire and delivery scans off the history.
CREATE INDEX schedule_slots_open_by_schedule ON schedule_slots (schedule_id)
    WHERE state IN ('PENDING', 'BUFFERED', 'SENDING');
CREATE INDEX schedule_slots_open_due ON schedule_slots (next_attempt_at)
    WHERE state IN ('PENDING', 'BUFFERED', 'SENDING');
CREATE INDEX schedule_slots_finished ON schedule_slots (finished_at) WHERE finished_at IS NOT NULL;
