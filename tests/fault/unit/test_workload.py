"""The workload records every operation faithfully (ok / fail / info by error
kind), the test app writes its ledger, and the report turns verdicts into rows."""

from __future__ import annotations

import importlib.util
import itertools
import json
import pathlib
import random
import types

import pytest

from ratchet import FatalError, RetryableError
from ratchet.client import Conflict, DeadlineExceeded, InvalidArgument, Unavailable
from tests.fault.checker.model import pair_ops
from tests.fault.harness.recorder import Recorder
from tests.fault.harness.report import markdown, row
from tests.fault.harness.workload import ClientProcess, WorkloadConfig

from .histories import clean
from .test_checker import verdict_of


class FakeClient:
    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.calls = []

    def enqueue(self, task_type, payload, **kw):
        self.calls.append(kw["idempotency_key"])
        out = self.outcomes.pop(0)
        if isinstance(out, Exception):
            raise out
        return out


def test_operations_are_classified_and_ambiguous_enqueues_retried(tmp_path):
    rec = Recorder(tmp_path / "h.jsonl")
    client = FakeClient([DeadlineExceeded("slow", "DEADLINE_EXCEEDED"), "tid-1",
                         InvalidArgument("bad", "INVALID_ARGUMENT"), Unavailable("down", "UNAVAILABLE"),
                         Conflict("taken", "ALREADY_EXISTS")])
    proc = ClientProcess("c0", client, rec, random.Random(1), "/ledger", WorkloadConfig(), itertools.count(1))
    first = proc.new_request()
    proc.enqueue(first)
    assert proc.retry_later == [first]
    proc.enqueue(proc.retry_later.pop(0))  # the retry: same op id and key
    proc.enqueue(proc.new_request())
    proc.enqueue(proc.new_request())
    proc.enqueue(proc.new_request())
    rec.close()
    ops, _ = pair_ops([json.loads(x) for x in (tmp_path / "h.jsonl").read_text().splitlines()])
    assert [o.type for o in ops] == ["info", "ok", "fail", "info", "fail"]
    assert ops[0].value["op"] == ops[1].value["op"] and client.calls[0] == client.calls[1]
    assert ops[1].result == {"op": first["op"], "task_id": "tid-1"} and proc.acked == ["tid-1"]
    assert "ledger" not in json.dumps(ops[0].value), "the history keeps the request, not the ledger path"


def _load_app():
    path = pathlib.Path(__file__).resolve().parents[1] / "app" / "app.py"
    spec = importlib.util.spec_from_file_location("fault_app", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ctx(attempt=1, epoch=1):
    return types.SimpleNamespace(task_id="t1", attempt=attempt, lease_epoch=epoch, cancelled=lambda: False)


def test_app_ledger_and_scripts(tmp_path):
    app = _load_app()
    ledger = tmp_path / "ledger.jsonl"
    handler = app._run
    res = handler(_ctx(epoch=7), {"op": "o1", "ledger": str(ledger), "mode": "ok"})
    assert res["lease_epoch"] == 7 and res["op"] == "o1"
    with pytest.raises(RetryableError):
        handler(_ctx(attempt=1), {"op": "o2", "ledger": str(ledger), "mode": "flaky", "succeed_on": 2})
    assert handler(_ctx(attempt=2), {"op": "o2", "ledger": str(ledger), "mode": "flaky", "succeed_on": 2})
    with pytest.raises(FatalError):
        handler(_ctx(), {"op": "o3", "ledger": str(ledger), "mode": "fatal"})
    lines = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert [(e["op"], e["phase"], e.get("outcome")) for e in lines] == [
        ("o1", "start", None), ("o1", "end", "ok"), ("o2", "start", None), ("o2", "end", "raise"),
        ("o2", "start", None), ("o2", "end", "ok"), ("o3", "start", None), ("o3", "end", "fatal")]
    assert all(e["task_id"] == "t1" and "pid" in e for e in lines)


def test_report_rows_and_table():
    b, _ = clean()
    verdict = verdict_of(b)
    verdict["harness"] = {"errors": [], "seconds": 1.0}
    r = row(verdict)
    assert r["status"] == "VALID" and r["lost"] == 0 and r["why"] == {"lease_expired": 1}
    assert r["faults"] == {}
    verdict["mutation"] = {"mutation": "x", "must_fail": ["acked_terminal"]}
    assert row(verdict)["status"] == "MISSED"
    table = markdown([r])
    assert table.splitlines()[2].startswith("| crafted | none |")


class FakeBatchClient:
    def __init__(self, outcomes):
        self.outcomes, self.sent = list(outcomes), []

    def send_enqueue_batch(self, req):
        self.sent.append(req)
        out = self.outcomes.pop(0)
        if isinstance(out, Exception):
            raise out
        return types.SimpleNamespace(task_ids=[t.task_id for t in req.tasks])


def test_plain_batches_record_the_ids_the_sdk_minted_and_are_not_resent(tmp_path):
    rec = Recorder(tmp_path / "h.jsonl")
    client = FakeBatchClient([None, Unavailable("down", "UNAVAILABLE")])  # ok, then ambiguous
    proc = ClientProcess("c0", client, rec, random.Random(3), "/ledger", WorkloadConfig(), itertools.count(1))
    proc.enqueue_plain_batch()
    proc.enqueue_plain_batch()
    rec.close()
    ops, _ = pair_ops([json.loads(x) for x in (tmp_path / "h.jsonl").read_text().splitlines()])
    assert [o.type for o in ops] == ["ok", "info"]
    for op, req in zip(ops, client.sent, strict=True):
        # No keys, no options, one type: the gateway's plain path.
        assert all(not t.idempotency_key and not t.HasField("delay") and t.task_type == "work" for t in req.tasks)
        assert [i["minted_id"] for i in op.value["items"]] == [t.task_id for t in req.tasks]
        assert all(i["key"] is None and i["op"] for i in op.value["items"])
    assert ops[0].result["task_ids"] == [t.task_id for t in client.sent[0].tasks]
    assert proc.acked[:len(client.sent[0].tasks)] == ops[0].result["task_ids"]
    assert proc.retry_later == []  # no key to resend with: the SDK's own retries resent the ids

