"""Probe-line parsing (peers' handler start times) and reading cells back from JSONL."""

import json

from loadtest import report
from loadtest.peers import probe
from loadtest.results import Cell, ResultLog, load


def test_parse_keeps_the_first_start_and_skips_garbage():
    text = "a 10.5\nb 11.0\na 9.25\nbroken\nc notanumber\n\n"
    assert probe.parse(text) == {"a": 9.25, "b": 11.0}


def test_probe_file_reads_only_whole_new_lines(tmp_path):
    pf = probe.ProbeFile(str(tmp_path / "p.log"))
    with open(pf.path, "a") as f:
        f.write("x 1.0\ny 2.")
    assert pf.read_new() == {"x": 1.0}
    with open(pf.path, "a") as f:
        f.write("5\n")
    assert pf.read_new() == {"y": 2.5}
    assert pf.read_new() == {}


def test_record_appends_probe_lines(tmp_path, monkeypatch):
    path = tmp_path / "probe.log"
    monkeypatch.setenv(probe.ENV, str(path))
    probe.record({"n": 1})
    probe.record({"n": 2, "probe": "k1"})
    probe.record("not a dict")
    assert list(probe.parse(path.read_text())) == ["k1"]


def test_cells_round_trip_through_jsonl(tmp_path):
    log = ResultLog(tmp_path, run_id="r1")
    c = Cell(system="dbos", workload="drain", params={"backlog": 10, "round": 2}, rate=12.5, unit="tasks/s",
             n=10, latency_ms={"p50": 1.0}, cpu_ms_per_task={"postgres": 0.5, "machine_busy_pct": 90.0})
    c.extra["label"] = "Postgres"
    log.add(c)
    line = json.loads(log.path.read_text())
    assert line["run_id"] == "r1" and line["system"] == "dbos"
    back = load(log.path)
    assert back[0] == c and back[0].key == "dbos/drain[backlog=10,round=2]"


def test_report_puts_lead_sections_first_and_splits_peer_cells():
    cells = [Cell(system="ratchet", workload="drain", params={}, rate=1.0),
             Cell(system="celery", workload="drain", params={}, rate=2.0),
             Cell(system="postgres", workload="PHYS_job", params={}, rate=3.0)]
    md = report.render(title="T", machine={"date_utc": "d"}, pg_settings={}, cells=cells, ratios=[],
                       verdicts=[], sections=[("Late", ["z"])], notes=[], mode="quick",
                       lead_sections=[("Issue-5 bar", ["| a |"])])
    assert md.index("## Issue-5 bar") < md.index("## Postgres") < md.index("## Ratchet cells")
    assert md.index("## Ratchet cells") < md.index("## Peer cells") < md.index("## Physical reference")
    assert md.index("## Physical reference") < md.index("## Late")
