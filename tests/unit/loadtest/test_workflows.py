"""The workflow cells' shared parts (loadtest/workflows.py): sizes, the figures over probe
times, the probe marks every system's workflow writes, and the report's section."""

import asyncio
import importlib.util
import pathlib

import pytest

from loadtest import workflows
from loadtest.peers import probe
from loadtest.peers.workflow_cells import wait_probes
from loadtest.results import Cell

APP = pathlib.Path(__file__).resolve().parents[3] / "loadtest" / "apps" / "noop" / "app.py"


def test_plan_sizes_and_overrides():
    q, full = workflows.plan(True), workflows.plan(False)
    assert (q.runs, q.steps, q.samples) == (100, 10, 30)
    assert (full.runs, full.steps, full.samples) == (200, 10, 50)
    p = workflows.plan(True, runs=7, steps=3, samples=2)
    assert (p.runs, p.steps, p.samples, p.limit_s) == (7, 3, 2, q.limit_s)
    with pytest.raises(ValueError, match="steps must be at least 1"):
        workflows.plan(True, steps=0)


def test_throughput_spans_first_begin_to_last_end_of_finished_runs():
    probes = {"a:b": 10.0, "a:e": 10.5, "b:b": 10.2, "b:e": 12.0, "c:b": 11.0, "other:e": 99.0}
    t = workflows.throughput(probes, ["a", "b", "c"], steps=10)
    assert (t.finished, t.started, t.span_s) == (2, 3, 2.0)
    assert t.rate == 10.0  # 2 runs x 10 steps / 2 s
    assert workflows.throughput({}, ["a"], 10).rate == 0.0
    assert workflows.ended(probes, ["a", "b", "c"]) == 2


def test_idle_samples_split_the_run_into_start_and_steps():
    s = workflows.IdleSamples()
    s.add(100.0, {"k:b": 100.010, "k:e": 100.060}, "k", steps=10)
    s.add(200.0, {"j:b": 200.5}, "j", steps=10)  # never ended: missed
    assert [round(x, 3) for x in s.run_ms] == [60.0]
    assert [round(x, 3) for x in s.step_ms] == [5.0]
    assert [round(x, 3) for x in s.start_ms] == [10.0]
    extra = s.extra()
    assert extra["missed"] == 1 and round(extra["step_ms"]["p50"], 3) == 5.0


def test_probe_mark_and_the_apps_mark_write_the_same_line(tmp_path, monkeypatch):
    path = tmp_path / "probe.log"
    monkeypatch.setenv(probe.ENV, str(path))
    probe.mark({"probe": "k1"}, "b")
    probe.mark({"n": 1}, "b")  # no probe: nothing
    spec = importlib.util.spec_from_file_location("noop_app_under_test", APP)
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    app._mark({"probe": "k1", "probe_file": str(path)}, "e")
    app._mark({"probe": "k2"}, "e")  # no file named: nothing
    got = probe.parse(path.read_text())
    assert set(got) == {"k1:b", "k1:e"} and got["k1:b"] <= got["k1:e"]


def test_wait_probes_returns_once_every_key_is_seen_or_at_the_timeout(tmp_path):
    pf = probe.ProbeFile(str(tmp_path / "p.log"))
    with open(pf.path, "a") as f:
        f.write("a:e 1.0\nb:b 2.0\n")
    seen = asyncio.run(wait_probes(pf, {}, ["a:e"], 2.0))
    assert seen == {"a:e": 1.0, "b:b": 2.0}
    seen = asyncio.run(wait_probes(pf, seen, ["c:e"], 0.05))
    assert "c:e" not in seen
    with pytest.raises(RuntimeError, match="worker died"):
        asyncio.run(wait_probes(pf, seen, ["c:e"], 2.0, alive=lambda: False))


def _steps(system, rate, commits, wal, label=None):
    c = Cell(system=system, workload="workflow_steps", params={"runs": 200, "steps": 10}, rate=rate,
             commits_per_task=commits, wal_bytes_per_task=wal, cpu_ms_per_task={"a": 1.0, "b": 2.0,
                                                                                 "machine_busy_pct": 90.0})
    if label:
        c.extra["label"] = label
    return c


def _idle(system, p50, step_p50):
    c = Cell(system=system, workload="workflow_run_idle", params={"steps": 10})
    c.latency_ms = {"p50": p50, "p99": p50 * 2}
    c.extra = {"step_ms": {"p50": step_p50, "p99": step_p50 * 2}, "start_to_first_line_ms": {"p50": 1.0},
               "cpu_ms_per_step": {"history": 1.5, "postgres": 0.5, "machine_busy_pct": 30.0}}
    return c


def test_report_table_has_every_row_ratios_and_the_fan_in_row():
    cells = [_steps("ratchet", 400.0, 2.5, 700.0), _idle("ratchet", 60.0, 5.0),
             _steps("dbos", 800.0, 5.0, 2500.0, label="Postgres"), _idle("dbos", 50.0, 2.5),
             Cell(system="celery", workload="drain", params={}, rate=1.0)]
    lines = workflows.report_table(cells)
    text = "\n".join(lines)
    assert lines[0].startswith("| metric | ratchet | dbos (Postgres) | Ratchet ÷ dbos |")
    assert "celery" not in lines[0]  # no workflow cells: no column
    assert "| steps/s: N runs of K no-op steps drained together | 400 | 800 | 0.50× ▼ |" in text
    assert "| step latency idle p50, ms ((last line - first line) / K) | 5.00 | 2.50 | 2.00× ▼ |" in text
    assert "| commits per step (whole runs, starts included) | 2.50 | 5.00 | 0.50× ▲ |" in text
    assert "| CPU ms per step, every process charged | 3.00 | 3.00 | 1.00× |" in text
    assert "| CPU ms per step at idle (one run at a time), every process | 2.00 | 2.00 | 1.00× |" in text
    assert "| fan-in latency, 1,000-way fan-out | not measured | not measured | – |" in text
    assert workflows.FAN_IN_NOTE in text and "N = 200 runs of K = 10 steps" in text


def test_report_table_is_empty_without_workflow_cells():
    assert workflows.report_table([Cell(system="ratchet", workload="drain", params={}, rate=1.0)]) == []


def test_report_takes_the_median_over_rounds_and_shows_every_round():
    cells = []
    for r, (rate, step) in enumerate(((300.0, 6.0), (500.0, 4.0), (400.0, 5.0)), start=1):
        c = _steps("ratchet", rate, 2.0, 700.0)
        i = _idle("ratchet", 50.0, step)
        if r > 1:
            c.params["round"] = i.params["round"] = r
        cells += [c, i]
    text = "\n".join(workflows.report_table(cells))
    assert "| steps/s: N runs of K no-op steps drained together | 400 |" in text
    assert "| step latency idle p50, ms ((last line - first line) / K) | 5.00 |" in text
    assert "| ratchet | 300 | 500 | 400 | 6.00 | 4.00 | 5.00 |" in text
