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
