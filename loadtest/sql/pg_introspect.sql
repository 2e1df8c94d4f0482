-- Server counters the bench reads on an admin connection to `postgres`.

-- name: db_commits_list
SELECT datname, xact_commit FROM pg_stat_database WHERE datname IS NOT NULL;

-- name: wal_lsn_bytes
SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint;

-- name: xid_next
SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint;

-- name: wal_stats_get
SELECT wal_sync, wal_records, wal_fpi FROM pg_stat_wal;

-- name: statements_extension_create
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

-- name: statements_reset
SELECT pg_stat_statements_reset();

-- name: statements_top
-- The costliest statements in the given databases, by total execution time.
SELECT d.datname, s.calls, s.total_exec_time, s.rows, s.shared_blks_hit, s.shared_blks_read,
       s.wal_bytes, regexp_replace(s.query, '\s+', ' ', 'g') AS query
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = ANY($1::text[])
ORDER BY s.total_exec_time DESC
LIMIT $2;
