-- Named queries on tasks (with the log and timer rows each state change
-- writes in the same statement; since migration 0008 a create and a lease
-- log nothing of their own: the task row implies the create, and the row
-- that ends a lease logs it). Every UPDATE that sets state
-- carries a `-- transitions:` comment; tests check it against
-- ratchet.libs.taskstate.ALLOWED and against the statement's state guard.
-- Only the shard clock (clock_timestamp()) decides due times and deadlines.

-- name: task_create
-- transitions: (create)->ENQUEUED
-- Create tasks of one or more requests (enqueue.plan's general statement:
-- keys, due times, per-task values), each request whole or not at all, and
-- say per row what happened: the committer decides every answer from these
-- rows (enqueue.outcome), never from an error. $1..$19 are the columns (a
-- column every row shares comes as a one-element array, Tx._create_args),
-- $20 each row's request (one element: all one request), $21 the key window
-- in seconds. Each row first looks for what the shard holds (the statement's
-- snapshot): a task with its id, a key row with its key's digest (one probe
-- each; the LIMIT keeps them probes, never a join with the table). A request
-- is written only if every row of it found neither; then its keys and tasks
-- are inserted, keys in key order so concurrent statements take them in one
-- order (no ON CONFLICT: no speculative-insert record per row). A key or
-- id another writer inserted after the snapshot makes the insert fail with a
-- unique violation and the statement writes nothing (Tx.task_create
-- returns None: the committer runs it again, and the next snapshot sees the
-- owner). A row returns created, or what it found: the id's owner (tenant,
-- app, type), or the key's task and fingerprint, whether that key row is past
-- its window (the committer expires it and goes again) and whether it is
-- another key with the same digest. The due time and the timer rows are
-- computed from the columns (the transaction's clock), not read back.
WITH now AS (SELECT clock_timestamp() AS t),
i AS (
    SELECT u.ord, u.task_id,
           CASE WHEN cardinality($20::int[]) = 1 THEN ($20::int[])[1] ELSE u.req END AS req,
           CASE WHEN cardinality($2::text[]) = 1 THEN ($2::text[])[1] ELSE u.tenant_id END AS tenant_id,
           CASE WHEN cardinality($3::text[]) = 1 THEN ($3::text[])[1] ELSE u.app_id END AS app_id,
           CASE WHEN cardinality($4::text[]) = 1 THEN ($4::text[])[1] ELSE u.task_type END AS task_type,
           CASE WHEN cardinality($5::text[]) = 1 THEN ($5::text[])[1] ELSE u.queue END AS queue,
           u.payload,
           CASE WHEN cardinality($7::float8[]) = 1 THEN ($7::float8[])[1] ELSE u.delay_s END AS delay_s,
           CASE WHEN cardinality($8::timestamptz[]) = 1 THEN ($8::timestamptz[])[1] ELSE u.run_at END AS run_at,
           CASE WHEN cardinality($9::text[]) = 1 THEN ($9::text[])[1] ELSE u.idempotency_key END AS idempotency_key,
           CASE WHEN cardinality($10::int[]) = 1 THEN ($10::int[])[1] ELSE u.max_attempts END AS max_attempts,
           CASE WHEN cardinality($11::jsonb[]) = 1 THEN ($11::jsonb[])[1] ELSE u.retry_policy END AS retry_policy,
           CASE WHEN cardinality($12::jsonb[]) = 1 THEN ($12::jsonb[])[1] ELSE u.timeouts END AS timeouts,
           CASE WHEN cardinality($13::jsonb[]) = 1 THEN ($13::jsonb[])[1] ELSE u.non_retryable END AS non_retryable,
           CASE WHEN cardinality($14::float8[]) = 1 THEN ($14::float8[])[1] ELSE u.schedule_to_start_s END AS schedule_to_start_s,
           CASE WHEN cardinality($15::float8[]) = 1 THEN ($15::float8[])[1] ELSE u.schedule_to_close_s END AS schedule_to_close_s,
           CASE WHEN cardinality($16::jsonb[]) = 1 THEN ($16::jsonb[])[1] ELSE u.retry_rules END AS retry_rules,
           CASE WHEN cardinality($17::text[]) = 1 THEN ($17::text[])[1] ELSE u.schedule_id END AS schedule_id,
           CASE WHEN cardinality($18::timestamptz[]) = 1 THEN ($18::timestamptz[])[1] ELSE u.scheduled_time END AS scheduled_time,
           CASE WHEN cardinality($19::text[]) = 1 THEN ($19::text[])[1] ELSE u.fingerprint END AS fingerprint
      FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[],
                  $7::float8[], $8::timestamptz[], $9::text[], $10::int[], $11::jsonb[],
                  $12::jsonb[], $13::jsonb[], $14::float8[], $15::float8[], $16::jsonb[], $17::text[],
                  $18::timestamptz[], $19::text[], $20::int[]) WITH ORDINALITY
        AS u(task_id, tenant_id, app_id, task_type, queue, payload, delay_s, run_at, idempotency_key,
             max_attempts, retry_policy, timeouts, non_retryable, schedule_to_start_s, schedule_to_close_s,
             retry_rules, schedule_id, scheduled_time, fingerprint, req, ord)
     -- A no-op (every row) that keeps the prepared statement on its generic plan: a LIMIT that
     -- is a parameter is estimated at a tenth of its input, so the generic plan's two probes
     -- per row cost what a custom plan's do. Without it the generic plan was estimated well
     -- above the custom one and Postgres planned the statement again on every call (backend
     -- CPU on every call; test_history_plans checks the generic plan is used).
     LIMIT cardinality($1::uuid[])
),
p AS (
    SELECT i.*, COALESCE(i.run_at, now.t + make_interval(secs => COALESCE(i.delay_s, 0))) AS due_at, now.t AS now_t,
           x.tenant_id AS id_tenant, x.app_id AS id_app, x.task_type AS id_type,
           k.task_id AS key_task, k.fingerprint AS key_fingerprint, k.expired AS key_expired, k.other AS key_other
      FROM i CROSS JOIN now
      LEFT JOIN LATERAL (SELECT t.tenant_id, t.app_id, t.task_type FROM tasks t WHERE t.task_id = i.task_id LIMIT 1) x
        ON true
      LEFT JOIN LATERAL (
          SELECT ik.task_id, ik.fingerprint, ik.expires_at <= now.t AS expired,
                 (ik.tenant_id, ik.app_id, ik.key) IS DISTINCT FROM (i.tenant_id, i.app_id, i.idempotency_key) AS other
            FROM idempotency_keys ik
           WHERE i.idempotency_key IS NOT NULL
             AND idempotency_key_hash(ik.tenant_id, ik.app_id, ik.key)
                 = idempotency_key_hash(i.tenant_id, i.app_id, i.idempotency_key)
           LIMIT 1) k ON true
),
held AS (
    -- The requests that found something: none of their rows goes (a request is whole or not at all).
    SELECT DISTINCT p.req FROM p WHERE p.id_tenant IS NOT NULL OR p.key_task IS NOT NULL
),
g AS (
    SELECT p.*, p.req NOT IN (SELECT held.req FROM held) AS go FROM p
),
k AS (
    INSERT INTO idempotency_keys (tenant_id, app_id, key, task_id, fingerprint, created_at, expires_at)
    SELECT g.tenant_id, g.app_id, g.idempotency_key, g.task_id, g.fingerprint, g.now_t,
           g.now_t + make_interval(secs => $21::float8)
      FROM g
     WHERE g.go AND g.idempotency_key IS NOT NULL
     ORDER BY g.tenant_id COLLATE "C", g.app_id COLLATE "C", g.idempotency_key COLLATE "C"
),
ins AS (
    INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt,
                       max_attempts, lease_epoch, payload, retry_policy, timeouts, non_retryable,
                       idempotency_key, run_at, created_at, updated_at, retry_rules, schedule_id,
                       scheduled_time)
    -- The default queue, policy and timeouts are stored as NULL (migration 0013).
    SELECT g.task_id, g.tenant_id, g.app_id, NULLIF(g.queue, 'default'), g.task_type, 'ENQUEUED', 1, 0,
           g.max_attempts, 0, g.payload, NULLIF(g.retry_policy, '{}'::jsonb), NULLIF(g.timeouts, '{}'::jsonb),
           -- (None is sent for no classes: no array subquery per row)
           CASE WHEN g.non_retryable IS NOT NULL
                THEN NULLIF(ARRAY(SELECT jsonb_array_elements_text(g.non_retryable)), '{}') END,
           g.idempotency_key, g.due_at, g.now_t, g.now_t, g.retry_rules, g.schedule_id, g.scheduled_time
      FROM g
     WHERE g.go
),
tm AS (
    -- One SELECT per timer kind (a UNION ALL), not a LATERAL VALUES list per row, which
    -- Postgres initialises again for every outer row (task_create_uniform says more).
    INSERT INTO timer_queue (task_id, kind, fire_at, lease_epoch)
    SELECT g.task_id, 'delay', g.due_at, 0 FROM g WHERE g.go AND g.due_at > g.now_t
    UNION ALL
    SELECT g.task_id, 'schedule_to_start', g.due_at + make_interval(secs => g.schedule_to_start_s), 0
      FROM g WHERE g.go AND g.schedule_to_start_s IS NOT NULL
    UNION ALL
    SELECT g.task_id, 'schedule_to_close', g.now_t + make_interval(secs => g.schedule_to_close_s), 0
      FROM g WHERE g.go AND g.schedule_to_close_s IS NOT NULL
)
SELECT g.ord, g.go AS created, g.go AND g.due_at <= g.now_t AS due, g.id_tenant, g.id_app, g.id_type,
       g.key_task, g.key_fingerprint, g.key_expired, g.key_other
  FROM g

-- name: task_create_uniform
-- transitions: (create)->ENQUEUED
-- enqueue.plan's uniform statement: fewer than COPY_MIN_ROWS uniform tasks, or
-- uniform tasks whose policy sets a schedule-to-start or schedule-to-close
-- timeout (timer rows); more without timer rows go by a binary COPY of the
-- same rows, ENQUEUED (Tx.task_copy_uniform; the times from migration 0015's
-- defaults). Uniform tasks of one or more requests: ids $1 and payloads
-- $2 as the only columns, every other value given once ($3..$13: tenant,
-- app, type, queue, then the policy as stored: max attempts, retry policy,
-- timeouts, non-retryable classes, rules, schedule-to-start and
-- schedule-to-close seconds). All due now, so a timer row only for the
-- timeouts the policy sets. An insert without task_create's probe per id
-- (and without ON CONFLICT): an id that exists (a resent request whose answer was lost, or one
-- taken by another) raises a unique violation, which writes nothing
-- (Tx.task_create_uniform returns False), and the committer runs the
-- requests through task_create, which answers them per task. Returns how
-- many rows it inserted. The two columns come as one value each, not as
-- arrays: $1 the ids joined by commas, $2 the
-- payloads as one JSON array (UTF-8); asyncpg encodes an array element by
-- element in Python (CPU per task), and
-- json_array_elements returns each element's text exactly as sent (the
-- caller checked each payload alone, so the array's elements are they).
WITH now AS (SELECT clock_timestamp() AS t),
ins AS (
    INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt,
                       max_attempts, lease_epoch, payload, retry_policy, timeouts, non_retryable,
                       idempotency_key, run_at, created_at, updated_at, retry_rules, schedule_id,
                       scheduled_time)
    -- The default queue, policy and timeouts are stored as NULL (migration 0013).
    SELECT u.task_id, $3::text, $4::text, NULLIF($6::text, 'default'), $5::text, 'ENQUEUED', 1, 0,
           $7::int, 0, convert_to(u.payload_json::text, 'UTF8'), NULLIF($8::jsonb, '{}'::jsonb), NULLIF($9::jsonb, '{}'::jsonb),
           NULLIF($10::text[], '{}'), NULL, now.t, now.t, now.t, $11::jsonb, NULL, NULL
      FROM ROWS FROM (unnest(string_to_array($1::text, ',')::uuid[]),
                      json_array_elements(convert_from($2::bytea, 'UTF8')::json)) AS u(task_id, payload_json)
     CROSS JOIN now
    RETURNING task_id, run_at, created_at
),
tm AS (
    -- One SELECT per timer kind, each skipped whole when the policy sets no such timeout (a
    -- one-time filter), not a LATERAL VALUES list per row: Postgres initialises a lateral
    -- VALUES list's expressions again for every outer row (a share of the statement's CPU).
    INSERT INTO timer_queue (task_id, kind, fire_at, lease_epoch)
    SELECT ins.task_id, 'schedule_to_start', ins.run_at + make_interval(secs => $12::float8), 0
      FROM ins WHERE $12::float8 IS NOT NULL
    UNION ALL
    SELECT ins.task_id, 'schedule_to_close', ins.created_at + make_interval(secs => $13::float8), 0
      FROM ins WHERE $13::float8 IS NOT NULL
)
SELECT count(*) FROM ins

-- name: task_get
SELECT * FROM tasks WHERE task_id = $1::uuid

-- name: task_lock
-- Lock one task for a single-task decision (cancel).
SELECT task_id, tenant_id, state, lease_epoch, cancel_requested
  FROM tasks WHERE task_id = $1::uuid
   FOR NO KEY UPDATE

-- name: task_state_batch
SELECT task_id, state FROM tasks WHERE task_id = ANY($1::uuid[])

-- name: task_ready_tenants
-- Tenants with ready work (ENQUEUED, run_at <= shard clock, app filter $3)
-- sorting after $1 and, when $2 is not NULL, not after $2; at most $4 of
-- them, in tenant order. The recursive CTE is a loose index scan over the
-- partial dispatch index: one probe per distinct tenant, so a tenant's
-- 100k-row backlog costs one probe, not 100k rows. ($5, $6, $7) are
-- (tenant, app, task_type) triples left out of this lease (paused or
-- capped by a circuit breaker): a tenant whose only ready work is theirs
-- does not count as ready.
WITH RECURSIVE tenants(tenant_id) AS (
    (SELECT t.tenant_id FROM tasks t
      WHERE t.state = 'ENQUEUED' AND t.tenant_id > $1::text
      ORDER BY t.tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT t.tenant_id FROM tasks t
             WHERE t.state = 'ENQUEUED' AND t.tenant_id > tenants.tenant_id
             ORDER BY t.tenant_id LIMIT 1)
      FROM tenants
     WHERE tenants.tenant_id IS NOT NULL AND ($2::text IS NULL OR tenants.tenant_id < $2::text)
)
SELECT tenants.tenant_id FROM tenants
 CROSS JOIN LATERAL (
       -- The tenant's oldest due row, read in the dispatch index's order (as the claim
       -- does). As an EXISTS the generic plan scanned the table from its start, every
       -- task leased or finished in front of the first ready one (a cost that grew with
       -- the drain; docs/benchmarks/findings.md).
       SELECT 1 FROM tasks r
        WHERE r.state = 'ENQUEUED' AND r.tenant_id = tenants.tenant_id
          AND r.run_at <= clock_timestamp()
          AND (cardinality($3::text[]) = 0 OR r.app_id = ANY($3::text[]))
          AND (cardinality($5::text[]) = 0
               OR NOT EXISTS (SELECT 1
                                FROM unnest($5::text[], $6::text[], $7::text[])
                                     AS x(tenant_id, app_id, task_type)
                               WHERE x.tenant_id = r.tenant_id AND x.app_id = r.app_id
                                 AND x.task_type = r.task_type))
        ORDER BY r.run_at
        LIMIT 1) due
 WHERE tenants.tenant_id IS NOT NULL
   AND ($2::text IS NULL OR tenants.tenant_id <= $2::text)
 LIMIT $4

-- name: task_claim_ready
-- Pick up to quota[i] ready tasks of each tenant[i], oldest due first,
-- skipping ids in $4 (already picked by this transaction) and tasks of the
-- (tenant, app, task_type) triples in ($5, $6, $7). No row lock (a lock
-- is a WAL record per task): the lease
-- UPDATE that follows takes only rows still ENQUEUED when it gets them (a
-- row changed meanwhile is re-checked and skipped, never leased twice).
-- History leases one shard one call at a time (Shard.lease_lock), so the
-- leases of one process never pick the same rows; two processes can, and the second
-- then waits for the first and leases fewer.
SELECT c.task_id, q.tenant_id
  FROM unnest($1::text[], $2::int[]) AS q(tenant_id, quota)
 CROSS JOIN LATERAL (
       SELECT t.task_id FROM tasks t
        WHERE t.state = 'ENQUEUED' AND t.tenant_id = q.tenant_id
          AND t.run_at <= clock_timestamp()
          AND (cardinality($3::text[]) = 0 OR t.app_id = ANY($3::text[]))
          AND t.task_id <> ALL($4::uuid[])
          -- The cardinality test lets the planner fold the exclusion away when no breaker is
          -- open (the usual case): with the anti-join left in, the custom plan estimated one
          -- row and sorted a sequential scan of the table, far slower than the
          -- index (docs/benchmarks/findings.md).
          AND (cardinality($5::text[]) = 0
               OR NOT EXISTS (SELECT 1 FROM unnest($5::text[], $6::text[], $7::text[])
                                            AS x(tenant_id, app_id, task_type)
                               WHERE x.tenant_id = t.tenant_id AND x.app_id = t.app_id
                                 AND x.task_type = t.task_type))
        ORDER BY t.run_at
        LIMIT q.quota
       ) c

-- name: task_claim_capped
-- Pick up to cap[i] ready tasks of each (tenant[i], app[i], task_type[i])
-- (a circuit breaker's probe), oldest due first, with the same app filter
-- ($5) and own-pick exclusion ($6) as task_claim_ready, and like it no lock.
SELECT c.task_id, q.tenant_id, q.app_id, q.task_type
  FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) AS q(tenant_id, app_id, task_type, cap)
 CROSS JOIN LATERAL (
       SELECT t.task_id FROM tasks t
        WHERE t.state = 'ENQUEUED' AND t.tenant_id = q.tenant_id
          AND t.app_id = q.app_id AND t.task_type = q.task_type
          AND t.run_at <= clock_timestamp()
          AND (cardinality($5::text[]) = 0 OR t.app_id = ANY($5::text[]))
          AND t.task_id <> ALL($6::uuid[])
        ORDER BY t.run_at
        LIMIT q.cap
       ) c

-- name: task_lease_batch
-- transitions: ENQUEUED->LEASED
-- Lease claimed tasks: charge the attempt and bump the fencing epoch now
-- (so a task that kills every worker still runs out of attempts), record
-- the attempt on the row (attempt number, worker, updated_at as the lease
-- time; the transition that ends the lease logs them), and set the lease's check
-- (the row's lease_check_at, its `lease` timer) at the earlier of lease
-- expiry and the attempt deadline. The delay and schedule_to_start timers
-- are moot once a task starts.
WITH now AS (SELECT clock_timestamp() AS t),
upd AS (
    UPDATE tasks t
       SET state = 'LEASED',
           attempt = t.attempt + 1,
           lease_epoch = t.lease_epoch + 1,
           version = t.version + 1,
           worker_id = $2::text,
           lease_expires_at = now.t + make_interval(secs => $3::float8),
           -- An absent start_to_close is 600 s (policy.STORED_START_TO_CLOSE_S), a null one unlimited.
           attempt_deadline = now.t + make_interval(secs => CASE WHEN t.timeouts ? 'start_to_close_s'
                                   THEN (t.timeouts->>'start_to_close_s')::float8 ELSE 600 END),
           lease_check_at = LEAST(now.t + make_interval(secs => $3::float8),
                                  now.t + make_interval(secs => CASE WHEN t.timeouts ? 'start_to_close_s'
                                       THEN (t.timeouts->>'start_to_close_s')::float8 ELSE 600 END)),
           cancel_requested = false, cancel_reason = NULL, kill_at = NULL,
           started_at = COALESCE(t.started_at, now.t),
           updated_at = now.t
      FROM now
     WHERE t.task_id = ANY($1::uuid[]) AND t.state = 'ENQUEUED'
    RETURNING t.*
),
moot AS (
    DELETE FROM timer_queue m USING upd
     WHERE m.task_id = upd.task_id AND m.kind IN ('delay', 'schedule_to_start')
)
SELECT upd.task_id, upd.tenant_id, upd.app_id, upd.task_type, COALESCE(upd.queue, 'default') AS queue,
       upd.payload, upd.attempt,
       upd.max_attempts, upd.lease_epoch, upd.run_at,
       CASE WHEN upd.timeouts ? 'start_to_close_s' THEN (upd.timeouts->>'start_to_close_s')::float8
            ELSE 600 END AS start_to_close_s,
       upd.schedule_id, upd.scheduled_time, upd.checkpoint
  FROM upd

-- name: task_heartbeat_batch
-- Extend leases still held at (task_id, lease_epoch). The lease timer is
-- not touched: it is lazy and reschedules itself when it finds the lease
-- extended. A passed attempt deadline turns into a start_to_close cancel
-- here too, so the worker hears CANCEL without waiting for the timer. Once
-- kill_at has passed the lease is no longer extended. A checkpoint ($5,
-- NULL for none) is stored under the same fence; checkpoint is not indexed,
-- so this stays one HOT update whether or not one is sent.
WITH i AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $5::bytea[]) AS i(task_id, lease_epoch, checkpoint)
),
locked AS (
    SELECT t.task_id, t.lease_epoch, i.checkpoint
      FROM tasks t JOIN i ON i.task_id = t.task_id AND i.lease_epoch = t.lease_epoch
     WHERE t.state = 'LEASED'
     ORDER BY t.task_id
       FOR NO KEY UPDATE OF t
),
now AS (SELECT clock_timestamp() AS t),
upd AS (
    UPDATE tasks t
       SET lease_expires_at = CASE WHEN t.kill_at IS NOT NULL AND t.kill_at <= now.t THEN t.lease_expires_at
                                   ELSE GREATEST(t.lease_expires_at, now.t + make_interval(secs => $3::float8)) END,
           cancel_requested = t.cancel_requested OR t.attempt_deadline <= now.t,
           cancel_reason = CASE WHEN t.cancel_requested THEN t.cancel_reason
                                WHEN t.attempt_deadline <= now.t THEN 'start_to_close' END,
           kill_at = CASE WHEN t.cancel_requested THEN t.kill_at
                          WHEN t.attempt_deadline <= now.t THEN now.t + make_interval(secs => $4::float8) END,
           checkpoint = COALESCE(locked.checkpoint, t.checkpoint)
      FROM locked, now
     WHERE t.task_id = locked.task_id AND t.lease_epoch = locked.lease_epoch AND t.state = 'LEASED'
    RETURNING t.task_id, t.lease_epoch, t.cancel_requested, t.cancel_reason,
              extract(epoch FROM (t.kill_at - now.t))::float8 AS kill_after_s
)
SELECT upd.* FROM upd

-- name: task_cancel_request_batch
-- Ask running attempts to stop: sets the flag the next heartbeat answers
-- CANCEL to, and the kill time after which the lease timer revokes the
-- lease. Reasons rank user > schedule_to_close > start_to_close, and an
-- earlier kill time is never pushed back.
WITH i AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[]) AS i(task_id, lease_epoch, reason)
)
UPDATE tasks t
   SET cancel_requested = true,
       cancel_reason = CASE WHEN t.cancel_reason = 'user' OR i.reason = 'user' THEN 'user'
                            WHEN t.cancel_reason = 'schedule_to_close' OR i.reason = 'schedule_to_close'
                                 THEN 'schedule_to_close'
                            ELSE i.reason END,
       kill_at = LEAST(t.kill_at, clock_timestamp() + make_interval(secs => $4::float8))
  FROM i
 WHERE t.task_id = i.task_id AND t.state = 'LEASED' AND t.lease_epoch = i.lease_epoch
RETURNING t.task_id

-- name: task_complete_read
-- Read, without locking, the tasks whose lease (task_id, lease_epoch) is
-- current: the completion path decides from this and applies with
-- task_transition_apply, whose compare-and-set on (state, lease_epoch, the
-- cancel request seen) refuses any row that changed in between; those rows
-- are decided again under task_complete_lock. A row lock per completed task
-- cost a LOCK WAL record and much of the drain's statement time.
-- One primary-key probe per id (the LIMIT keeps the subquery from being
-- flattened into a join, and the filters stay outside it, else the planner
-- probes the partial index by state): as an ordinary join it hash-joined the
-- partial index of leased tasks, whose dead entries pile up during a drain
-- (slower and slower until the next vacuum).
SELECT t.task_id, t.state, t.lease_epoch, t.attempt, t.max_attempts, t.retry_policy, t.retry_rules,
       t.non_retryable, t.cancel_requested, t.cancel_reason
  FROM unnest($1::uuid[], $2::bigint[]) AS i(task_id, lease_epoch)
 CROSS JOIN LATERAL (SELECT * FROM tasks t WHERE t.task_id = i.task_id LIMIT 1) t
 WHERE t.lease_epoch = i.lease_epoch AND t.state = 'LEASED'

-- name: task_complete_lock
-- Lock the tasks whose lease (task_id, lease_epoch) is still current, in
-- task_id order so concurrent batches cannot deadlock.
SELECT t.task_id, t.state, t.lease_epoch, t.attempt, t.max_attempts, t.retry_policy, t.retry_rules,
       t.non_retryable, t.cancel_requested, t.cancel_reason
  FROM tasks t JOIN unnest($1::uuid[], $2::bigint[]) AS i(task_id, lease_epoch)
    ON t.task_id = i.task_id AND t.lease_epoch = i.lease_epoch
 WHERE t.state = 'LEASED'
 ORDER BY t.task_id
   FOR NO KEY UPDATE OF t

-- name: task_transition_apply
-- transitions: LEASED->SUCCEEDED, LEASED->RETRY_WAIT, LEASED->FAILED, LEASED->CANCELED, RETRY_WAIT->ENQUEUED, RETRY_WAIT->CANCELED, RETRY_WAIT->EXPIRED, ENQUEUED->CANCELED, ENQUEUED->EXPIRED, WAITING->CANCELED, WAITING->EXPIRED
-- Apply a batch of decided transitions, each a compare-and-set on
-- (task_id, from_state, lease_epoch) and, when cancel_seen is given, on the
-- cancel request the decision read ('' none, 'requested:<reason>'), for
-- decisions made from an unlocked read; the wrapper checks every (from, to)
-- against taskstate.ALLOWED before sending; a transition out of LEASED
-- also fences on the version whose lease it logs. In the same statement: the
-- log row (which ends the running attempt: a transition out of LEASED
-- carries the attempt's outcome and error, and the lease itself, read off the
-- task row: migration 0008), timers (a lease ends:
-- its check, lease_check_at, is cleared; a terminal task: all its timers
-- go; RETRY_WAIT: a retry timer at the new run_at), and a completion's
-- checkpoint when it has one; a fan-out's child that ends, its outbox row
-- (child_end: only rows with a parent_id). A suspended workflow run (WAITING) ends here
-- too, by a cancel or its schedule_to_close (its `wake` timer goes with the
-- others); it enters and leaves WAITING otherwise by workflows.sql's
-- workflow_suspend_batch and workflow_wake_batch.
WITH now AS (SELECT clock_timestamp() AS t),
i AS (
    -- $2..$16 come as one element when every transition of the batch has that value (a batch
    -- of successes differs only in its ids): asyncpg encodes an array element by element
    -- (Tx.task_transition_apply); a one-element column is every row's.
    SELECT u.task_id,
           CASE WHEN cardinality($2::text[]) = 1 THEN ($2::text[])[1] ELSE u.from_state END AS from_state,
           CASE WHEN cardinality($3::bigint[]) = 1 THEN ($3::bigint[])[1] ELSE u.lease_epoch END AS lease_epoch,
           CASE WHEN cardinality($4::text[]) = 1 THEN ($4::text[])[1] ELSE u.to_state END AS to_state,
           CASE WHEN cardinality($5::float8[]) = 1 THEN ($5::float8[])[1] ELSE u.delay_s END AS delay_s,
           CASE WHEN cardinality($6::bytea[]) = 1 THEN ($6::bytea[])[1] ELSE u.result END AS result,
           CASE WHEN cardinality($7::text[]) = 1 THEN ($7::text[])[1] ELSE u.error_class END AS error_class,
           CASE WHEN cardinality($8::text[]) = 1 THEN ($8::text[])[1] ELSE u.error_message END AS error_message,
           CASE WHEN cardinality($9::text[]) = 1 THEN ($9::text[])[1] ELSE u.error_stack END AS error_stack,
           CASE WHEN cardinality($10::text[]) = 1 THEN ($10::text[])[1] ELSE u.reason END AS reason,
           CASE WHEN cardinality($11::text[]) = 1 THEN ($11::text[])[1] ELSE u.attempt_outcome END AS attempt_outcome,
           CASE WHEN cardinality($12::text[]) = 1 THEN ($12::text[])[1] ELSE u.attempt_error_class END AS attempt_error_class,
           CASE WHEN cardinality($13::text[]) = 1 THEN ($13::text[])[1] ELSE u.attempt_error_message END AS attempt_error_message,
           CASE WHEN cardinality($14::text[]) = 1 THEN ($14::text[])[1] ELSE u.attempt_error_stack END AS attempt_error_stack,
           CASE WHEN cardinality($15::bytea[]) = 1 THEN ($15::bytea[])[1] ELSE u.checkpoint END AS checkpoint,
           CASE WHEN cardinality($16::text[]) = 1 THEN ($16::text[])[1] ELSE u.cancel_seen END AS cancel_seen
      FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::float8[], $6::bytea[],
                  $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
                  $13::text[], $14::text[], $15::bytea[], $16::text[])
        AS u(task_id, from_state, lease_epoch, to_state, delay_s, result, error_class, error_message,
             error_stack, reason, attempt_outcome, attempt_error_class, attempt_error_message,
             attempt_error_stack, checkpoint, cancel_seen)
),
upd AS (
    UPDATE tasks t
       SET state = i.to_state,
           version = t.version + 1,
           updated_at = now.t,
           finished_at = CASE WHEN i.to_state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED') THEN now.t END,
           run_at = CASE WHEN i.to_state = 'RETRY_WAIT'
                         THEN now.t + make_interval(secs => COALESCE(i.delay_s, 0)) ELSE t.run_at END,
           result = COALESCE(i.result, t.result),
           error_class = COALESCE(i.error_class, t.error_class),
           error_message = CASE WHEN i.error_class IS NOT NULL THEN i.error_message ELSE t.error_message END,
           error_stack = CASE WHEN i.error_class IS NOT NULL THEN i.error_stack ELSE t.error_stack END,
           lease_expires_at = NULL,
           attempt_deadline = NULL,
           kill_at = NULL,
           lease_check_at = NULL,
           cancel_requested = CASE WHEN i.to_state IN ('RETRY_WAIT', 'ENQUEUED') THEN false
                                   ELSE t.cancel_requested END,
           cancel_reason = CASE WHEN i.to_state IN ('RETRY_WAIT', 'ENQUEUED') THEN NULL ELSE t.cancel_reason END,
           checkpoint = COALESCE(i.checkpoint, t.checkpoint)
      -- The lease a transition out of LEASED ends, as the task row holds it (the guard
      -- fences on its version): logged with the transition. One primary-key probe per id
      -- (the LIMIT keeps it a lateral probe: as a join with the CTE the plan probed every
      -- (row, row) pair, 14,400 probes per 120-row batch).
      FROM i LEFT JOIN LATERAL (
               SELECT o.version, o.updated_at, o.attempt, o.worker_id FROM tasks o
                WHERE o.task_id = i.task_id AND i.from_state = 'LEASED' LIMIT 1) lease ON true,
           now
     -- task_id = ANY($1): the rows are found through the key whatever the table's size
     -- (joined only to the CTE, a table of a few thousand rows was scanned whole).
     WHERE t.task_id = ANY($1::uuid[]) AND t.task_id = i.task_id
       AND t.state = i.from_state AND t.lease_epoch = i.lease_epoch AND t.version = COALESCE(lease.version, t.version)
       AND (i.cancel_seen IS NULL OR i.cancel_seen = CASE WHEN t.cancel_requested THEN 'requested:'
                                                          || coalesce(t.cancel_reason, '') ELSE '' END)
    RETURNING t.task_id, t.version, t.state, t.lease_epoch, t.attempt, t.run_at, t.updated_at, t.started_at,
              lease.updated_at AS leased_at, lease.attempt AS leased_attempt, lease.worker_id AS leased_worker,
              t.parent_id
),
child_end AS (
    -- A fan-out's child that ended: its outbox row (migration 0017), which the shard's
    -- delivery loop records on the parent's shard. Filtered on the returned parent_id first:
    -- a task without a parent (every task but a child) costs one NULL test, no probe.
    INSERT INTO workflow_child_outbox (child_id, parent_id, position, child_index, state, result, error_class,
                                       error_message, ended_at)
    SELECT c.child_id, c.parent_id, c.position, c.child_index, upd.state, i.result, i.error_class, i.error_message,
           upd.updated_at
      FROM upd JOIN i ON i.task_id = upd.task_id
      JOIN workflow_children c ON c.child_id = upd.task_id
     WHERE upd.parent_id IS NOT NULL AND upd.state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')
        ON CONFLICT (child_id) DO NOTHING
    RETURNING 1
),
tr AS (
    INSERT INTO task_log (task_id, version, from_state, to_state, lease_epoch, at, reason, outcome,
                          error_class, error_message, error_stack, leased_at, attempt, worker_id)
    SELECT upd.task_id, upd.version, i.from_state, upd.state, upd.lease_epoch, upd.updated_at, i.reason,
           i.attempt_outcome, i.attempt_error_class, i.attempt_error_message, i.attempt_error_stack,
           upd.leased_at, upd.leased_attempt, upd.leased_worker
      FROM upd JOIN i ON i.task_id = upd.task_id
     -- The success of a first lease is implied by the task row (migration 0010).
     WHERE (upd.state = 'SUCCEEDED' AND upd.version = 3 AND i.reason = 'succeeded'
            AND i.attempt_outcome = 'SUCCEEDED' AND i.attempt_error_class IS NULL
            AND i.attempt_error_message IS NULL AND i.attempt_error_stack IS NULL
            AND upd.leased_at = upd.started_at) IS NOT TRUE
),
gone AS (
    DELETE FROM timer_queue m USING upd
     WHERE m.task_id = upd.task_id AND upd.state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')
),
retry_timer AS (
    INSERT INTO timer_queue (task_id, kind, fire_at, lease_epoch)
    SELECT upd.task_id, 'retry', upd.run_at, upd.lease_epoch FROM upd WHERE upd.state = 'RETRY_WAIT'
    ON CONFLICT (task_id, kind) DO UPDATE SET fire_at = EXCLUDED.fire_at, lease_epoch = EXCLUDED.lease_epoch
)
-- child_ends: whether the statement wrote an outbox row (computed once, an InitPlan): the
-- caller wakes the delivery loop after its commit.
SELECT upd.task_id, upd.state, upd.version, EXISTS (SELECT 1 FROM child_end) AS child_ends FROM upd

-- name: task_retry_batch
-- transitions: (create)->ENQUEUED
-- Bulk retry of terminal tasks: for each (original $1, new id $2, reason
-- $3) whose original is terminal and not yet retried, set the original's
-- retried_as (a link, not a state change: no version bump, no transition
-- row, its state stays terminal) and insert the new task as a fresh copy
-- (same tenant, app, type, queue, payload, policy, rules, timeouts and
-- schedule fields; attempt 0, retry_of = the original; due now) with its
-- logged create transition (version 1: its reason names the operation) and
-- its timeout timers, in one statement.
-- Returns the pairs done; an original retried meanwhile is left out.
WITH now AS (SELECT clock_timestamp() AS t),
i AS (
    SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS i(original_id, task_id, reason)
),
orig AS (
    UPDATE tasks o
       SET retried_as = i.task_id
      FROM i
     WHERE o.task_id = i.original_id AND o.retried_as IS NULL
       AND o.state IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'EXPIRED')
    RETURNING o.task_id AS original_id, i.task_id, i.reason, o.tenant_id, o.app_id, o.queue, o.task_type,
              o.max_attempts, o.payload, o.retry_policy, o.retry_rules, o.timeouts, o.non_retryable,
              o.schedule_id, o.scheduled_time
),
ins AS (
    INSERT INTO tasks (task_id, tenant_id, app_id, queue, task_type, state, version, attempt,
                       max_attempts, lease_epoch, payload, retry_policy, retry_rules, timeouts, non_retryable,
                       run_at, created_at, updated_at, schedule_id, scheduled_time, retry_of)
    SELECT orig.task_id, orig.tenant_id, orig.app_id, orig.queue, orig.task_type, 'ENQUEUED', 1, 0,
           orig.max_attempts, 0, orig.payload, orig.retry_policy, orig.retry_rules, orig.timeouts,
           orig.non_retryable, now.t, now.t, now.t, orig.schedule_id, orig.scheduled_time, orig.original_id
      FROM orig CROSS JOIN now
    RETURNING task_id, run_at, created_at, timeouts, retry_of
),
tr AS (
    INSERT INTO task_log (task_id, version, from_state, to_state, lease_epoch, at, reason)
    SELECT ins.task_id, 1, NULL, 'ENQUEUED', 0, ins.created_at, orig.reason
      FROM ins JOIN orig ON orig.task_id = ins.task_id
),
tm AS (
    -- (one SELECT per timer kind: see task_insert_batch)
    INSERT INTO timer_queue (task_id, kind, fire_at, lease_epoch)
    SELECT ins.task_id, 'schedule_to_start',
           ins.run_at + make_interval(secs => (ins.timeouts->>'schedule_to_start_s')::float8), 0
      FROM ins WHERE ins.timeouts->>'schedule_to_start_s' IS NOT NULL
    UNION ALL
    SELECT ins.task_id, 'schedule_to_close',
           ins.created_at + make_interval(secs => (ins.timeouts->>'schedule_to_close_s')::float8), 0
      FROM ins WHERE ins.timeouts->>'schedule_to_close_s' IS NOT NULL
)
SELECT ins.retry_of AS original_id, ins.task_id FROM ins
