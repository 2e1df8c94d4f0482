"""Pure parts of the side-by-side suite: interleaving, aggregation over rounds,
ratios, verdicts and their Markdown."""

from loadtest import compare
from loadtest.results import Cell


def cell(system, workload, rate=None, label=None, **params):
    c = Cell(system=system, workload=workload, params=params, rate=rate)
    if label:
        c.extra["label"] = label
    return c


def lat(system, workload, p50, p99, **params):
    c = Cell(system=system, workload=workload, params=params)
    c.latency_ms = {"p50": p50, "p99": p99, "p999": p99}
    return c


def test_round_orders_alternate_direction():
    assert compare.round_orders(["a", "b", "c"], 3) == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]
    assert compare.round_orders(["a"], 0) == []


def test_median_over_rounds_and_best_producer_count():
    cells = [cell("ratchet", "drain", 100, backlog=10_000), cell("ratchet", "drain", 300, backlog=10_000, round=2),
             cell("ratchet", "drain", 200, backlog=10_000, round=3),
             cell("ratchet", "enqueue_single", 50, producers=1), cell("ratchet", "enqueue_single", 90, producers=8),
             cell("ratchet", "enqueue_single", 110, producers=8, round=2)]
    assert compare.median_rate(cells, "ratchet", "drain") == (200, 3)
    assert compare.best_rate(cells, "ratchet", "enqueue_single", by="producers") == (100, 8)


def test_drain_metric_ignores_the_big_backlog():
    cells = [cell("p", "drain", 1000, backlog=10_500), cell("p", "drain", 10, backlog=100_000)]
    assert compare.metric(cells, "p", "drain") == 1000


def test_failed_cells_do_not_count():
    bad = cell("p", "drain", 5000, backlog=10)
    bad.ok = False
    assert compare.median_rate([bad], "p", "drain") == (None, 0)


def test_ratio_and_its_mark():
    assert compare.ratio(3, 2) == 1.5
    assert compare.ratio(None, 2) is None and compare.ratio(1, 0) is None
    assert compare.fmt_ratio(1.5, True) == "1.50× ▲"
    assert compare.fmt_ratio(1.5, False) == "1.50× ▼"
    assert compare.fmt_ratio(1.0, True) == "1.00×"
    assert compare.fmt_ratio(None, True) == "–"


def test_systems_put_ratchet_first_and_skip_the_reference():
    cells = [cell("postgres", "PHYS_job", 1), cell("celery", "drain", 1), cell("ratchet", "drain", 1)]
    assert compare.systems(cells) == ["ratchet", "celery"]


def _run():
    return [
        cell("postgres", "PHYS_job", 3000, clients=8), cell("postgres", "PHYS_job", 2000, clients=32),
        cell("postgres", "PHYS_commit", 8000, clients=32),
        cell("ratchet", "drain", 3300, backlog=10_000), cell("ratchet", "enqueue_single", 900, producers=32),
        lat("ratchet", "schedule_to_start_idle", 6.5, 45.0),
        lat("ratchet", "enqueue_ack_open_loop", 10.0, 60.0, fraction=0.75),
        cell("procrastinate", "drain", 400, label="Postgres", backlog=10_000),
        cell("procrastinate", "enqueue_single", 1500, label="Postgres", producers=8),
        cell("celery", "drain", 9000, label="Redis, not durable", backlog=10_000),
        cell("celery", "enqueue_single", 3000, label="Redis, not durable", producers=8),
    ]


def test_peer_bars_compare_with_postgres_peers_only():
    cells = _run()
    for c in cells:
        if c.system == "postgres" and c.workload == "PHYS_job":
            c.commits_per_task, c.wal_bytes_per_task = 3.0, 800.0
    r = next(c for c in cells if c.system == "ratchet" and c.workload == "drain")
    r.commits_per_task, r.wal_bytes_per_task = 1.4, 2000.0
    bars = {b["bar"]: b for b in compare.peer_bars(cells)}
    # Celery (not durable) drains faster but does not count against the Postgres bar.
    assert bars["drain ahead of every Postgres-backed peer"]["verdict"] == "PASS"
    assert bars["enqueue capacity, single calls ahead of every Postgres-backed peer"]["verdict"] == "FAIL"
    # Batch calls are rows of their own, each against the peers' cells of the same size.
    assert bars["enqueue capacity, batch calls of 100 ahead of every Postgres-backed peer"]["verdict"] \
        == "NOT MEASURED"
    assert bars["drain >= 1.0 x PHYS_job (unbatched reference)"]["verdict"] == "PASS"
    assert bars["idle schedule-to-start p50"]["verdict"] == "PASS"
    assert bars["idle schedule-to-start p99"]["verdict"] == "PASS"
    assert bars["enqueue ack p99 at 75 % of capacity"]["verdict"] == "FAIL"
    assert bars["commits per task"]["verdict"] == "PASS"
    drain_only = bars["WAL bytes per task <= 2 x the reference's (drain only)"]
    assert drain_only["verdict"] == "FAIL" and "2.50×" in drain_only["measured"]
    # The whole life adds the enqueue's WAL (32 producers): not measured without that cell.
    life = "WAL bytes per task <= 2 x the reference's (whole life: enqueue + drain)"
    assert bars[life]["verdict"] == "NOT MEASURED"
    enq = [c for c in cells if c.system == "ratchet" and c.workload == "enqueue_single"]
    enq[0].params["producers"], enq[0].wal_bytes_per_task = 32, 400.0
    bars = {b["bar"]: b for b in compare.peer_bars(cells)}
    assert bars[life]["verdict"] == "FAIL" and "3.00× (2,400 vs 800 B)" in bars[life]["measured"]


def test_batch_bars_compare_calls_of_the_same_size():
    cells = _run() + [
        cell("ratchet", "enqueue_batch", 30_000, batch=100, producers=4),
        cell("ratchet", "enqueue_batch", 90_000, batch=1000, producers=2),
        cell("procrastinate", "enqueue_batch", 40_000, label="Postgres", batch=100, producers=4),
        cell("procrastinate", "enqueue_batch", 60_000, label="Postgres", batch=1000, producers=2),
        cell("celery", "enqueue_batch", 99_000, label="Redis, not durable", batch=1000, producers=2),
    ]
    bars = {b["bar"]: b for b in compare.peer_bars(cells)}
    hundred = bars["enqueue capacity, batch calls of 100 ahead of every Postgres-backed peer"]
    assert hundred["verdict"] == "FAIL" and "(0.75×)" in hundred["measured"]
    thousand = bars["enqueue capacity, batch calls of 1,000 ahead of every Postgres-backed peer"]
    assert thousand["verdict"] == "PASS" and "(1.50×)" in thousand["measured"]
    row = next(line for line in compare.comparison_table(cells) if line.startswith("| enqueue, batch calls of 1,000"))
    assert "1.50× ▲" in row


def test_batch_capacity_is_the_best_producer_count_median_over_rounds():
    # Issue 5's grid (1, 8, 32 producers) for batch calls too: each system's best count, its
    # rounds' median; calls of 1,000 do not count toward calls of 100.
    cells = _run() + [
        cell("ratchet", "enqueue_batch", 20_000, batch=100, producers=1),
        cell("ratchet", "enqueue_batch", 45_000, batch=100, producers=8),
        cell("ratchet", "enqueue_batch", 41_000, batch=100, producers=8, round=2),
        cell("ratchet", "enqueue_batch", 60_000, batch=100, producers=32),
        cell("ratchet", "enqueue_batch", 30_000, batch=100, producers=32, round=2),
        cell("ratchet", "enqueue_batch", 30_000, batch=100, producers=32, round=3),
        cell("ratchet", "enqueue_batch", 99_000, batch=1000, producers=2),
        cell("graphile-worker", "enqueue_batch", 52_000, label="Postgres", batch=100, producers=8),
        cell("graphile-worker", "enqueue_batch", 36_000, label="Postgres", batch=100, producers=32),
    ]
    assert compare.metric(cells, "ratchet", "enqueue_batch") == 43_000  # 8: median of 45k and 41k
    assert compare.metric(cells, "graphile-worker", "enqueue_batch") == 52_000
    bars = {b["bar"]: b for b in compare.peer_bars(cells)}
    hundred = bars["enqueue capacity, batch calls of 100 ahead of every Postgres-backed peer"]
    assert hundred["verdict"] == "FAIL" and "43,000 vs best peer graphile-worker 52,000" in hundred["measured"]


def test_no_sdk_rows_show_ratchets_unary_and_rest_capacity():
    cells = _run() + [cell("ratchet", "enqueue_single_unary", 2400, producers=32),
                      cell("ratchet", "enqueue_single_rest", 3400, producers=32)]
    table = compare.comparison_table(cells)
    rest = next(line for line in table if "REST POST /v1/tasks" in line)
    unary = next(line for line in table if "unary gRPC EnqueueTask" in line)
    assert "| 3,400 |" in rest and "| 2,400 |" in unary
    # The bar compares the SDK's single calls only (enqueue_single).
    bars = {b["bar"]: b for b in compare.peer_bars(cells)}
    assert "900 vs" in bars["enqueue capacity, single calls ahead of every Postgres-backed peer"]["measured"]


def test_bar_not_measured_without_cells():
    assert {b["verdict"] for b in compare.peer_bars([])} == {"NOT MEASURED"}


def test_comparison_table_rows_and_ratios():
    table = compare.comparison_table(_run())
    assert table[0].startswith("| metric | ratchet | procrastinate (Postgres) | celery (Redis, not durable) |")
    assert table[0].endswith("| Ratchet ÷ procrastinate | Ratchet ÷ celery |")
    drain = next(line for line in table if line.startswith("| drain"))
    assert "8.25× ▲" in drain and "0.37× ▼" in drain
    # No peer measured a timer: the row is left out.
    assert not any(line.startswith("| timer") for line in table)


def test_reference_table_and_rounds_table():
    ref = compare.reference_table(_run())
    assert ref[2].startswith("| ratchet | 1.100 |")
    cells = _run() + [cell("ratchet", "drain", 3000, backlog=10_000, round=2),
                      cell("ratchet", "enqueue_single", 800, producers=32, round=2)]
    rounds = compare.rounds_table(cells)
    assert rounds[0] == "| system | drain r1 | drain r2 | enqueue r1 | enqueue r2 |"
    assert rounds[2] == "| ratchet | 3,300 | 3,000 | 900 | 800 |"


def test_recovery_reads_the_rate_or_says_why():
    ok = cell("dbos", "recovery", 3.2)
    late = cell("graphile-worker", "recovery", None)
    late.extra["limit_s"] = 75.0
    assert compare.recovery_s([ok], "dbos") == (3.2, "")
    assert compare.recovery_s([late], "graphile-worker") == (None, "not finished in 75.0 s")
    assert compare.recovery_s([], "x") == (None, "not measured")


def test_shards_table_divides_by_one_shard():
    cells = [cell("ratchet", "shards_drain", 100, shards=1), cell("ratchet", "shards_drain", 180, shards=2),
             cell("ratchet", "shards_enqueue", 50, shards=1, producers=32),
             cell("ratchet", "shards_enqueue", 75, shards=2, producers=32)]
    table = compare.shards_table(cells)
    assert table[2] == "| 1 | 50.0 | 100 | 1.00× | 1.00× |"
    assert table[3] == "| 2 | 75.0 | 180 | 1.50× ▲ | 1.80× ▲ |"
    assert compare.shards_table([]) == []


def test_big_drain_is_its_own_row():
    small = cell("p", "drain", 1000, backlog=70_000)
    small.extra["requested_backlog"] = 10_000  # a peer's round-1 backlog also holds the enqueue cells' tasks
    big = cell("p", "drain", 400, backlog=100_000)
    big.extra["requested_backlog"] = 100_000
    assert compare.metric([small, big], "p", "drain") == 1000
    assert compare.metric([small, big], "p", "drain_big") == 400


def test_unrecovered_peer_is_shown_as_such():
    late = cell("graphile-worker", "recovery", None, label="Postgres")
    late.extra["limit_s"] = 75.0
    table = compare.comparison_table([cell("ratchet", "recovery", 33.0), late])
    row = next(line for line in table if line.startswith("| recovery"))
    assert "| 33.0 | not done in 75.0 s | –" in row
