"""Chart data (and one drawing, when matplotlib is installed) and the issue-2 bar's
choice of round-1 cells once later rounds exist."""

import pytest

from loadtest import charts, verdicts
from loadtest.results import Cell


def _cells():
    out = [Cell(system="ratchet", workload="drain", params={"backlog": 10_000}, rate=900.0),
           Cell(system="ratchet", workload="drain", params={"backlog": 10_000, "round": 2}, rate=1100.0),
           Cell(system="ratchet", workload="enqueue_single", params={"producers": 8}, rate=400.0),
           Cell(system="postgres", workload="PHYS_job", params={"clients": 8}, rate=3000.0)]
    for frac, p99 in ((0.25, 20.0), (0.75, 80.0)):
        c = Cell(system="ratchet", workload="enqueue_ack_open_loop", params={"fraction": frac}, rate=1.0)
        c.latency_ms = {"p50": 5.0, "p99": p99, "p999": p99 * 2}
        out.append(c)
    return out


def test_chart_data_follows_the_comparison():
    data = charts.throughput_data(_cells())
    assert data["ratchet"]["drain"] == 1000.0  # median of 900 and 1100
    assert data["ratchet"]["enqueue_capacity"] == 400.0
    assert charts.latency_data(_cells())["ratchet"][0.75] == {"p50": 5.0, "p99": 80.0, "p999": 160.0}


def test_draw_writes_both_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    made = charts.draw(_cells(), tmp_path, "run1", "test")
    assert [name for _, name in made] == ["run1-throughput.png", "run1-latency.png"]
    assert all((tmp_path / name).stat().st_size > 1000 for _, name in made)


def test_reference_bars_read_round_one_only():
    bars = {b["bar"]: b for b in verdicts.reference_bars(_cells())}
    assert bars["drain >= 0.4 x PHYS_job"]["measured"].startswith("0.30 x (900")
