-- The dispatcher's database (ratchet_dispatch): one circuit breaker per
-- (tenant, app, task type). The dispatcher is the only writer; every write
-- is a compare-and-set on (key, state, version) inside a transaction that
-- locked the row first. Rows are created by the first crash of a type.

CREATE TABLE breakers (
    tenant_id       text COLLATE "C" NOT NULL,
    app_id          text COLLATE "C" NOT NULL,
    task_type       text COLLATE "C" NOT NULL,
    state           text NOT NULL DEFAULT 'CLOSED',
    -- Crash times within the sliding window, newest first (pruned on write,
    -- bounded; the window count is computed against the database clock).
    crash_times     timestamptz[] NOT NULL DEFAULT '{}',
    -- The last crashes, newest first: [{task_id, lease_epoch, error_class, message, at}].
    last_crashes    jsonb NOT NULL DEFAULT '[]',
    reason          text NOT NULL DEFAULT '',
    opened_at       timestamptz,
    -- OPEN: when the cool-down ends and the breaker turns HALF_OPEN.
    probe_at        timestamptz,
    -- HALF_OPEN: the dispatcher process that may let the one probe through,
    -- the probe task once leased, and when it was claimed (then leased).
    probe_owner     text,
    probe_task_id   text,
    probe_leased_at timestamptz,
    version         bigint NOT NULL DEFAULT 1,
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, app_id, task_type),
    CONSTRAINT breakers_state_known CHECK (state IN ('CLOSED', 'OPEN', 'HALF_OPEN')),
    CONSTRAINT breakers_opened_iff_not_closed CHECK ((state = 'CLOSED') = (opened_at IS NULL)),
    CONSTRAINT breakers_open_has_probe_at CHECK (state <> 'OPEN' OR probe_at IS NOT NULL),
    CONSTRAINT breakers_probe_only_half_open CHECK (
        state = 'HALF_OPEN' OR (probe_owner IS NULL AND probe_task_id IS NULL AND probe_leased_at IS NULL)),
    CONSTRAINT breakers_probe_task_claimed CHECK (probe_task_id IS NULL OR probe_leased_at IS NOT NULL),
    CONSTRAINT breakers_last_crashes_bounded CHECK (
        jsonb_typeof(last_crashes) = 'array' AND jsonb_array_length(last_crashes) <= 10),
    CONSTRAINT breakers_crash_times_bounded CHECK (coalesce(array_length(crash_times, 1), 0) <= 1000)
);

-- The refresh loop's scan: the few breakers that are not CLOSED.
CREATE INDEX breakers_not_closed ON breakers (tenant_id, app_id, task_type) WHERE state <> 'CLOSED';
