-- Workflow fan-outs (issue 24): ctx.parallel and ctx.child. A fan-out is a
-- step-log row of kind PARALLEL or CHILD whose children are tasks (or
-- workflow runs) of the app, anywhere in the mesh. A child's terminal
-- transition writes an outbox row on the child's shard in the same
-- transaction; delivering it to the parent's shard records the child's end
-- once (workflow_child_done's key) and decrements one stripe of the
-- fan-out's barrier; the stripe reaching zero decrements the top row, and
-- the top row reaching zero completes the step and wakes the parent.

-- The parent run of a fan-out's child (NULL for every other task): read by
-- the statements that end a task, so only children's ends do child work.
-- No query filters on it (workflow_children answers "whose child"): no statistics (0007).
ALTER TABLE tasks ADD COLUMN parent_id uuid;
ALTER TABLE tasks ALTER COLUMN parent_id SET STATISTICS 0;

ALTER TABLE workflow_steps
    ADD COLUMN child_count integer,
    ADD COLUMN on_failure text,
    DROP CONSTRAINT workflow_steps_kind_known,
    ADD CONSTRAINT workflow_steps_kind_known CHECK (kind IN
        ('STEP', 'VERSION', 'SLEEP', 'WAIT', 'PARALLEL', 'CHILD')),
    ADD CONSTRAINT workflow_steps_fanout_has_children CHECK (
        (kind IN ('PARALLEL', 'CHILD')) = (child_count IS NOT NULL)
        AND (on_failure IS NULL OR on_failure IN ('COLLECT', 'FAIL_FAST')));

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

-- A resent event to one run (SendWorkflowEvent.event_id) is kept once.
ALTER TABLE workflow_inbox ADD COLUMN event_id text;
CREATE UNIQUE INDEX workflow_inbox_event_id ON workflow_inbox (workflow_id, event_id)
    WHERE event_id IS NOT NULL;
