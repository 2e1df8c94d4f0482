-- Compensations (issue 24): ctx.on_cancel registers one (a step-log row of
-- kind ON_CANCEL), a COMPENSATE row records one that ran after a cancel, and
-- a cancelled run that registered any keeps its cancel here until the
-- activation that runs them ends it CANCELED.

ALTER TABLE workflow_steps
    DROP CONSTRAINT workflow_steps_kind_known,
    ADD CONSTRAINT workflow_steps_kind_known CHECK (kind IN
        ('STEP', 'VERSION', 'SLEEP', 'WAIT', 'PARALLEL', 'CHILD', 'ON_CANCEL', 'COMPENSATE'));

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

-- Cascades pending as outbox markers move to their table.
INSERT INTO workflow_cascades (workflow_id, position, next_index, opened_at)
SELECT parent_id, position, child_index, ended_at FROM workflow_child_outbox WHERE state = 'CASCADE'
    ON CONFLICT (workflow_id, position) DO NOTHING;
DELETE FROM workflow_child_outbox WHERE state = 'CASCADE';
