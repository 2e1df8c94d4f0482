"""Ratchet's benchmark suite: `python -m loadtest.bench` (`make bench`).

Method and bars: ../shared/design/PERFORMANCE.md, issues 2 and 5. Modules:
bench (driver), pgserver (the bench's own Postgres), physical (pgbench and
batched references), ratchet_cells (the platform's cells), dbstats and cpu
(per-task commits, WAL and CPU), profiling (py-spy), results, report, verdicts.
"""
