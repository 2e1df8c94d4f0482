-- The WAL probe's queries (loadtest/walprobe.py): pg_walinspect over a phase
-- of the workload, attributed to relations by the first block a record touches.

-- name: walinspect_create
CREATE EXTENSION IF NOT EXISTS pg_walinspect;

-- name: wal_insert_lsn
SELECT pg_current_wal_insert_lsn();

-- name: wal_flush_lsn
SELECT pg_current_wal_flush_lsn();

-- name: wal_flush_now
-- A write transaction of our own: its commit flushes every record before it,
-- so pg_walinspect may read up to the LSN taken just before.
SELECT txid_current();

-- name: wal_records_grouped
-- Records in [$1, $2) by resource manager, record type and the relation of
-- their first block reference (database oid, relfilenode, fork); records
-- without a block (commits, checkpoints) have NULLs there. record_length
-- includes the full-page images; fpi_length is their part.
SELECT w.resource_manager AS rmgr, w.record_type,
       (substring(w.block_ref FROM 'blkref #0: rel \d+/(\d+)/\d+'))::oid AS db_oid,
       (substring(w.block_ref FROM 'blkref #0: rel \d+/\d+/(\d+)'))::oid AS relfilenode,
       substring(w.block_ref FROM 'blkref #0: rel \d+/\d+/\d+ fork (\w+)') AS fork,
       count(*) AS records,
       sum(w.record_length)::bigint AS bytes,
       sum(w.fpi_length)::bigint AS fpi_bytes,
       count(*) FILTER (WHERE w.fpi_length > 0) AS fpi_records
  FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn) w
 GROUP BY 1, 2, 3, 4, 5

-- name: database_oids
SELECT oid, datname FROM pg_database

-- name: database_names
SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname

-- name: relation_filenodes
-- Every relation of this database by its file node; a TOAST table or index
-- is named after the table that owns it.
SELECT pg_relation_filenode(c.oid) AS relfilenode, c.relkind,
       COALESCE((SELECT o.relname || ' (toast)' FROM pg_class o WHERE o.reltoastrelid = c.oid),
                (SELECT o.relname || ' (toast index)' FROM pg_class o JOIN pg_class t ON t.oid = o.reltoastrelid
                  JOIN pg_index i ON i.indrelid = t.oid WHERE i.indexrelid = c.oid),
                c.relname) AS relname
  FROM pg_class c
 WHERE pg_relation_filenode(c.oid) IS NOT NULL

-- name: unfinished_count
SELECT count(*) FROM tasks WHERE state IN ('ENQUEUED', 'LEASED', 'RETRY_WAIT')

-- name: succeeded_count
SELECT count(*) FROM tasks WHERE state = 'SUCCEEDED'
