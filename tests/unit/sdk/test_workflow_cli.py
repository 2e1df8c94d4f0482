"""`ratchet workflows start|get|cancel|list` and `ratchet events send` against a fake
gateway (their JSON, exit codes and one-line errors), and the deploy command's handler
kinds from the describe output."""

from __future__ import annotations

import json

import pytest

from ratchet.api.apps.v1 import apps_pb2
from ratchet.cli import commands
from ratchet.cli.errors import CLIError
from ratchet.cli.main import main
from tests.unit.sdk.fake_workflows import FakeGateway

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def gw(monkeypatch, tmp_path):
    g = FakeGateway(steps_per_run=3)
    monkeypatch.setenv("RATCHET_ENDPOINT", g.endpoint)
    monkeypatch.setenv("RATCHET_API_KEY", "rk_test")
    monkeypatch.chdir(tmp_path)
    yield g
    g.stop()


def run(capsys, *argv: str) -> tuple[int, object, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_start_get_list_cancel(gw, capsys):
    code, out, _ = run(capsys, "workflows", "start", "onboard", "--input", '{"user": "ada"}', "--key", "k-1",
                       "--delay", "5s", "--queue", "flows")
    assert code == 0 and out == {"workflow_id": "wf-1"}
    req = gw.workflows.requests[-1]
    assert (req.idempotency_key, req.queue, req.delay.seconds) == ("k-1", "flows", 5)
    assert dict(req.input.struct_value) == {"user": "ada"}
    code, out, _ = run(capsys, "workflows", "get", "wf-1", "--page-size", "2")
    assert code == 0 and out["state"] == "WAITING" and [s["name"] for s in out["steps"]] == ["s0", "s1"]
    assert out["pending"]["name"] == "approved" and out["pending"]["match"] == {"user": "ada"}
    assert out["next_step_page_token"]
    code, out, _ = run(capsys, "workflows", "get", "wf-1", "--page-size", "2", "--all-steps")
    assert code == 0 and [s["position"] for s in out["steps"]] == [0, 1, 2, 3] and out["next_step_page_token"] is None
    _, started, _ = run(capsys, "workflows", "start", "approve")
    assert gw.workflows.requests[-1].workflow_id == started["workflow_id"]  # (no key: the CLI's SDK mints the id)
    code, out, _ = run(capsys, "workflows", "list", "--page-size", "1")
    assert code == 0 and [w["workflow_id"] for w in out["workflows"]] == [started["workflow_id"]]
    assert out["next_page_token"]
    code, out, _ = run(capsys, "workflows", "list", "--all", "--page-size", "1", "--type", "onboard",
                       "--state", "WAITING")
    assert code == 0 and [w["workflow_id"] for w in out["workflows"]] == ["wf-1"]
    code, out, _ = run(capsys, "workflows", "cancel", "wf-1")
    assert code == 0 and out == {"workflow_id": "wf-1", "state": "CANCELED"}


def test_events_send_broadcasts_or_delivers_to_one_run(gw, capsys):
    _, first, _ = run(capsys, "workflows", "start", "onboard", '{"user": "ada"}')
    wid = first["workflow_id"]
    assert dict(gw.workflows.requests[-1].input.struct_value) == {"user": "ada"}
    run(capsys, "workflows", "start", "onboard")
    code, out, _ = run(capsys, "events", "send", "approved", "--workflow", wid, "--data", '{"user": "ada"}')
    assert code == 0 and out == {"workflow_id": wid, "name": "approved", "delivered": True}
    assert gw.workflows.requests[-1].event_id.startswith("sdk-")
    code, out, _ = run(capsys, "events", "send", "approved", '{"user": "ada"}')  # (as docs/workflows.md writes it)
    assert code == 0 and out == {"name": "approved", "delivered": 1}
    assert gw.workflows.inbox == [(wid, "approved", {"user": "ada"})]


def test_children_are_listed_and_get_shows_the_fan_outs_counts(gw, capsys):
    _, started, _ = run(capsys, "workflows", "start", "onboard", "--key", "fan")
    wid = started["workflow_id"]
    position = gw.workflows.fan_out(wid, 3, done=1)
    code, out, _ = run(capsys, "workflows", "get", wid)
    assert code == 0 and out["step_count"] == position + 1
    fan = out["steps"][position]
    assert (fan["kind"], fan["child_count"], fan["children_done"]) == ("PARALLEL", 3, 1)
    assert out["steps"][0]["child_count"] == 0
    code, out, _ = run(capsys, "workflows", "children", wid, str(position), "--page-size", "2")
    assert code == 0 and [(c["index"], c["state"]) for c in out["children"]] == [(0, "SUCCEEDED"), (1, "ENQUEUED")]
    assert out["children"][0] == {"index": 0, "child_id": f"{wid}-c0", "task_type": "charge", "state": "SUCCEEDED",
                                  "result": 0, "error": None}
    code, rest, _ = run(capsys, "workflows", "children", wid, str(position), "--page-token", out["next_page_token"])
    assert code == 0 and [c["index"] for c in rest["children"]] == [2] and rest["next_page_token"] is None
    code, out, _ = run(capsys, "workflows", "children", wid, str(position), "--all", "--page-size", "1")
    assert code == 0 and [c["index"] for c in out["children"]] == [0, 1, 2] and out["next_page_token"] is None
    code, _, err = run(capsys, "workflows", "children", wid, "0")
    assert code == 1 and "NOT_FOUND: no fan-out at position 0" in err


@pytest.mark.parametrize("argv, fragment", [
    (["workflows", "start", "onboard", "--input", "{nope"], "--input is not valid JSON"),
    (["workflows", "start", "echo"], "INVALID_ARGUMENT: workflow_type 'echo' is a task handler"),
    (["workflows", "get", "wf-none"], "NOT_FOUND: workflow wf-none not found"),
    (["workflows", "get", "wf-1", "--page-size", "0"], "--page-size must be between 1 and 1000"),
    (["workflows", "get", "wf-1", "--all-steps", "--page-token", "x"], "give --all-steps or --page-token"),
    (["workflows", "list", "--all", "--page-token", "x"], "give --all or --page-token, not both"),
    (["workflows", "list", "--state", "ASLEEP"], "unknown task state 'ASLEEP'"),
    (["events", "send", "go", "--data", "[1]"], "--data must be a JSON object"),
    (["events", "send", "go", "--data", "{"], "--data is not valid JSON"),
    (["events", "send", "go", "{}", "--data", "{}"], "give the JSON as an argument or as --data, not both"),
    (["workflows", "start", "onboard", "1", "--input", "2"], "as an argument or as --input, not both"),
    (["workflows", "children", "wf-1", "-1"], "POSITION must be 0 or more"),
    (["workflows", "children", "wf-1", "0", "--all", "--page-token", "x"], "give --all or --page-token, not both"),
    (["workflows", "children", "wf-1", "0", "--page-size", "1001"], "--page-size must be between 1 and 1000"),
    (["workflows", "children", "wf-none", "0"], "NOT_FOUND: workflow wf-none not found"),
])
def test_bad_flags_fail_in_one_line(gw, capsys, argv, fragment):
    code, out, err = run(capsys, *argv)
    assert code == 1 and out is None and err.startswith("error: ") and fragment in err and err.count("\n") == 1


def test_deploy_sends_each_handlers_kind_and_resume():
    described = {"module": "app", "handlers": [
        {"name": "send"}, {"name": "resize", "kind": "task"},
        {"name": "onboard", "kind": "workflow", "resume": "latest", "retry": {"max_attempts": 3}},
        {"name": "old_flow", "kind": "workflow"}]}
    hs = commands.handler_messages(described)
    assert [(h.name, h.kind, h.resume) for h in hs] == [
        ("send", apps_pb2.HANDLER_KIND_TASK, 0), ("resize", apps_pb2.HANDLER_KIND_TASK, 0),
        ("onboard", apps_pb2.HANDLER_KIND_WORKFLOW, apps_pb2.WORKFLOW_RESUME_LATEST),
        ("old_flow", apps_pb2.HANDLER_KIND_WORKFLOW, apps_pb2.WORKFLOW_RESUME_LATEST)]
    assert hs[2].retry.max_attempts == 3
    pinned = commands.handler_messages({"handlers": [{"name": "p", "kind": "workflow", "resume": "pinned"}]})
    assert pinned[0].resume == apps_pb2.WORKFLOW_RESUME_PINNED  # the gateway decides whether it serves it
    with pytest.raises(CLIError, match="kind 'actor'"):
        commands.handler_messages({"handlers": [{"name": "a", "kind": "actor"}]})
    with pytest.raises(CLIError, match="resume 'sometimes'"):
        commands.handler_messages({"handlers": [{"name": "a", "kind": "workflow", "resume": "sometimes"}]})
