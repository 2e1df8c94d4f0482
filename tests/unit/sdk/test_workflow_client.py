"""The client's workflow calls (sync and asyncio) against a fake WorkflowService: what they
send, what they return, which failures they retry and which they must not."""

from __future__ import annotations

import datetime as dt

import grpc
import pytest

from ratchet.aio import AsyncClient
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.client import Client, DeadlineExceeded, InvalidArgument, NotFound, Unavailable
from ratchet.libs.shardmap import parse_task_id
from tests.unit.sdk.fake_workflows import FakeGateway

U, D = grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED
AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def gw():
    g = FakeGateway(steps_per_run=5)
    yield g
    g.stop()


@pytest.fixture
def client(gw):
    c = Client(gw.endpoint, "rk_test", timeout=5.0)
    c._t.sleep = lambda seconds: None
    yield c
    c.close()


def test_start_sends_the_input_and_survives_a_lost_answer_with_one_run(gw, client):
    gw.workflows.fail_with = [D, U]  # the run is written, the answers are lost twice
    wid = client.start_workflow("onboard", {"user": "ada", "n": 2}, delay="30s", queue="flows")
    assert list(gw.workflows.runs) == [wid]
    first, *resent = gw.workflows.requests
    assert len(resent) == 2 and all(r == first for r in resent)  # resent unchanged, id and all
    # No key given: the run's id is minted here (a task id carrying its slot), and no key is sent.
    assert first.workflow_id == wid and parse_task_id(wid) == wid and not first.idempotency_key
    assert first.queue == "flows" and first.delay.seconds == 30
    assert dict(first.input.struct_value) == {"user": "ada", "n": 2.0}
    again = client.start_workflow("onboard", idempotency_key="mine")
    assert again == "wf-2" and gw.workflows.requests[-1].idempotency_key == "mine"
    assert not gw.workflows.requests[-1].workflow_id  # (exclusive with a key)
    assert not gw.workflows.requests[-1].HasField("input")
    assert client.start_workflow("onboard") not in (wid, again)  # a fresh id per start


def test_start_refusals_say_what_to_fix(gw, client):
    with pytest.raises(InvalidArgument, match="'echo' is a task handler"):
        client.start_workflow("echo", {})
    with pytest.raises(InvalidArgument, match="workflow_type must be the name"):
        client.start_workflow("")
    with pytest.raises(InvalidArgument, match="input must be JSON-serializable"):
        client.start_workflow("onboard", {"x": object()})
    with pytest.raises(InvalidArgument, match="delay"):
        client.start_workflow("onboard", delay="soon")


def test_get_workflow_returns_the_run_its_pending_wait_and_a_page_of_steps(gw, client):
    wid = client.start_workflow("onboard", {"user": "ada"})
    run = client.get_workflow(wid, step_page_size=2)
    assert (run.workflow_id, run.workflow_type, run.state, run.input, run.activations, run.step_count) == \
        (wid, "onboard", "WAITING", {"user": "ada"}, 2, 6)
    assert (run.pending.kind, run.pending.name, run.pending.match, run.pending.wake_at) == \
        ("WAIT", "approved", {"user": "ada"}, AT)
    assert [(s.position, s.name, s.kind, s.state, s.result) for s in run.steps] == \
        [(0, "s0", "STEP", "COMPLETED", 0), (1, "s1", "STEP", "COMPLETED", 1)]
    assert run.next_step_page_token and not run.terminal
    nxt = client.get_workflow(wid, step_page_size=2, step_page_token=run.next_step_page_token)
    assert [s.position for s in nxt.steps] == [2, 3]
    assert run.to_dict()["pending"]["wake_at"] == AT.isoformat()
    with pytest.raises(NotFound):
        client.get_workflow("wf-none")


def test_iter_workflow_steps_follows_every_page(gw, client):
    wid = client.start_workflow("onboard")
    steps = list(client.iter_workflow_steps(wid, page_size=2))
    assert [s.position for s in steps] == [0, 1, 2, 3, 4, 5] and steps[-1].kind == "WAIT"
    assert steps[-1].state == "RUNNING" and steps[-1].wake_at == AT
    tokens = [r.step_page_token for r in gw.workflows.requests if hasattr(r, "step_page_token")]
    assert tokens[0] == "" and all(tokens[1:]) and len(tokens) == 3


def test_list_and_iter_workflows(gw, client):
    w1, w2, w3 = (client.start_workflow(kind) for kind in ("onboard", "approve", "onboard"))
    client.cancel_workflow(w2)
    page = client.list_workflows(page_size=2)
    assert [w.workflow_id for w in page.workflows] == [w3, w2] and page.next_page_token
    assert page.workflows[0].steps == [] and page.workflows[0].pending is None
    assert [w.workflow_id for w in client.iter_workflows(workflow_type="onboard", page_size=1)] == [w3, w1]
    waiting = client.list_workflows(state="WAITING")
    assert [w.workflow_id for w in waiting.workflows] == [w3, w1]
    assert gw.workflows.requests[-1].state == tasks_pb2.TASK_STATE_WAITING
    with pytest.raises(InvalidArgument, match="unknown task state 'ASLEEP'"):
        client.list_workflows(state="ASLEEP")
    with pytest.raises(InvalidArgument, match="a single state name"):
        client.list_workflows(state=["WAITING"])


def test_cancel_is_retried_as_it_is_safe_to_repeat(gw, client):
    wid = client.start_workflow("onboard")
    gw.workflows.fail_with = [D]
    assert client.cancel_workflow(wid) == "CANCELED"


def test_events_to_a_run_are_resent_with_their_id_and_broadcasts_only_when_unsent(gw, client):
    wid = client.start_workflow("onboard")
    gw.workflows.fail_with = [U, D]  # kept, and the answers lost twice: the resends carry the same id
    assert client.send_workflow_event(wid, "other", {"a": 1}) is False
    assert gw.workflows.inbox == [(wid, "other", {"a": 1})]
    sent = [r for r in gw.workflows.requests if hasattr(r, "event_id")]
    assert len(sent) == 3 and len({r.event_id for r in sent}) == 1 and sent[0].event_id.startswith("sdk-")
    assert client.send_workflow_event(wid, "other", {"a": 1}) is False  # a new call: a new event
    assert len(gw.workflows.inbox) == 2 and gw.workflows.requests[-1].event_id != sent[0].event_id
    gw.workflows.fail_with = [D]  # a broadcast may have arrived: not resent, the caller decides
    with pytest.raises(DeadlineExceeded):
        client.send_event("approved", {"user": "ada"})
    assert client.send_event("approved", {"user": "bob"}) == 0
    assert client.send_event("approved", {"user": "ada", "by": "ops"}) == 1
    assert client.send_workflow_event(wid, "approved") is False  # it woke already: kept
    assert gw.workflows.requests[-1].data == type(gw.workflows.requests[-1].data)()  # no data: {}
    with pytest.raises(InvalidArgument, match="data must be a dict"):
        client.send_event("approved", [1])
    gw.workflows.fail_with = [U] * 10
    with pytest.raises(Unavailable):
        client.send_event("approved", {})


async def test_the_async_client_has_the_same_calls(gw):
    async with AsyncClient(gw.endpoint, "rk_test", timeout=5.0) as client:
        async def no_sleep(seconds):
            return None
        client.sleep = no_sleep
        gw.workflows.fail_with = [D]
        wid = await client.start_workflow("onboard", {"user": "ada"}, idempotency_key="k1")
        assert wid == "wf-1" and len(gw.workflows.runs) == 1
        run = await client.get_workflow(wid, step_page_size=4)
        assert run.state == "WAITING" and [s.position for s in run.steps] == [0, 1, 2, 3]
        assert [s.position async for s in client.iter_workflow_steps(wid, page_size=4)] == list(range(6))
        assert [w.workflow_id for w in (await client.list_workflows()).workflows] == [wid]
        gw.workflows.fail_with = [D]  # (resent with its event id: the run took it once)
        assert await client.send_workflow_event(wid, "approved", {"user": "ada"}) is True
        assert gw.workflows.inbox == [(wid, "approved", {"user": "ada"})]
        gw.workflows.runs[wid].state = tasks_pb2.TASK_STATE_WAITING
        assert await client.send_event("approved", {"user": "ada"}) == 1
        assert await client.send_workflow_event(wid, "approved") is False
        assert await client.cancel_workflow(wid) == "CANCELED"


def test_wait_workflow_returns_the_run_once_it_has_ended(gw, client):
    wid = client.start_workflow("onboard", idempotency_key="w1")
    gw.workflows.ends_after[wid] = 3
    gw.workflows.fail_with = [U]  # (a read that fails is read again)
    run = client.wait_workflow(wid, timeout=10, max_interval=0.05)
    assert (run.workflow_id, run.state, run.result, run.terminal) == (wid, "SUCCEEDED", "done", True)
    reads = [r.step_page_size for r in gw.workflows.requests if hasattr(r, "step_page_size")]
    assert reads == [1, 1, 1, 1, 0] and len(run.steps) == 6  # (polls read one step; the answer a full page)
    other = client.start_workflow("onboard", idempotency_key="w2")
    with pytest.raises(TimeoutError, match=f"workflow {other} is still WAITING after 0.2s"):
        client.wait_workflow(other, timeout=0.2, max_interval=0.05)
    with pytest.raises(NotFound):
        client.wait_workflow("wf-none", timeout=1)


def test_children_of_a_fan_out_are_listed_and_iterated_with_the_steps_counts(gw, client):
    wid = client.start_workflow("onboard", idempotency_key="f1")
    position = gw.workflows.fan_out(wid, 5, done=2)
    step = client.get_workflow(wid).steps[position]
    assert (step.kind, step.child_count, step.children_done) == ("PARALLEL", 5, 2)
    assert client.get_workflow(wid).steps[0].child_count == 0
    page = client.list_workflow_children(wid, position, page_size=2)
    assert [(c.index, c.child_id, c.task_type, c.state, c.result) for c in page.children] == \
        [(0, f"{wid}-c0", "charge", "SUCCEEDED", 0), (1, f"{wid}-c1", "charge", "SUCCEEDED", 1)]
    assert page.next_page_token and page.children[0].to_dict()["error"] is None
    kids = list(client.iter_workflow_children(wid, position, page_size=2))
    assert [c.index for c in kids] == [0, 1, 2, 3, 4] and kids[4].state == "ENQUEUED" and kids[4].result is None
    req = [r for r in gw.workflows.requests if hasattr(r, "position")][-1]
    assert (req.workflow_id, req.position, req.page_size) == (wid, position, 2)
    with pytest.raises(NotFound, match="no fan-out at position 0"):
        client.list_workflow_children(wid, 0)
    for bad in (-1, "3", True):
        with pytest.raises(InvalidArgument, match="position must be a fan-out's position"):
            client.list_workflow_children(wid, bad)


async def test_the_async_client_waits_and_lists_children(gw):
    async with AsyncClient(gw.endpoint, "rk_test", timeout=5.0) as client:
        wid = await client.start_workflow("onboard")
        assert gw.workflows.requests[-1].workflow_id == wid
        position = gw.workflows.fan_out(wid, 3, done=3)
        assert [c.index async for c in client.iter_workflow_children(wid, position, page_size=2)] == [0, 1, 2]
        assert (await client.list_workflow_children(wid, position)).next_page_token is None
        gw.workflows.ends_after[wid] = 2
        assert (await client.wait_workflow(wid, timeout=10, max_interval=0.05)).state == "SUCCEEDED"
