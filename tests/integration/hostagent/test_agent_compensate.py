"""Compensations through the real host agent and real sandboxes (the SDK's stub), against
a fake dispatcher whose Step answers from the SDK's in-memory step log (memlog.StepLog,
history's rules as ratchet.testing follows them): an activation registers its on_cancel
rows and suspends; after a cancel the next activation replays to the sleep, is answered
CANCELLED there, runs the compensations last first as COMPENSATE steps from that position
and completes CANCELED; a compensation that fails retryably fails the activation
retryably, and the one after it runs only what is unfinished."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest
from google.protobuf import duration_pb2

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.gateway.v1 import control_pb2_grpc
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.internal.worker.v1 import worker_pb2_grpc
from ratchet.services.hostagent import steps
from ratchet.services.hostagent.server import HostAgent
from ratchet.workflow.memlog import StepLog
from tests.integration.hostagent.conftest import agent_config
from tests.integration.hostagent.fakes import FakeControl, FakeDispatcher, _authorized

pytestmark = pytest.mark.timeout(60)

APP = '''
from ratchet import workflow


def release(seat):
    return {"released": seat}


def refund(ctx, amount, flaky):
    if flaky and ctx.step_attempt == 1:
        raise ConnectionError("the bank is down")
    return {"refunded": amount, "step_attempt": ctx.step_attempt}


@workflow
def book(ctx, flaky):
    seat = ctx.step("reserve", lambda: "7A")
    ctx.on_cancel(release, seat)
    ctx.step("charge", lambda: 120)
    ctx.on_cancel(refund, ctx, 120, flaky, name="refund")
    ctx.sleep("until_departure", seconds=3600)
    return "flown"
'''

STATUS = {name: number for number, name in steps.STATUSES.items()}


class LogDispatcher(FakeDispatcher):
    """FakeDispatcher whose Step answers from one StepLog per task; `cancel(task_id)` is
    history's CancelTask of a run with compensations (the log's workflow_cancels row)."""

    def __init__(self):
        super().__init__()
        self.steps: list[wpb.StepRequest] = []
        self.logs: dict[str, StepLog] = {}
        self.now = 0.0

    def cancel(self, task_id: str) -> None:
        self.logs[task_id].cancelled = True

    async def Step(self, request, context):
        if not _authorized(context, self.unauthorized):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        self.steps.append(request)
        log = self.logs.setdefault(request.lease.task_id, StepLog(request.lease.task_id))
        answer = log.answer(_as_frame(request), request.lease.lease_epoch, self.now)
        if answer["status"] == "lost":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, answer["message"] or "")
        return _as_response(answer)


def _as_frame(request: wpb.StepRequest) -> dict:
    error = None
    if request.HasField("error"):
        error = {"error_class": request.error.error_class, "message": request.error.message, "stack": ""}
    return {"op": "begin" if request.op == wpb.STEP_OP_BEGIN else "commit", "position": request.position,
            "name": request.name, "kind": steps.KIND_NAMES[request.kind],
            "result": request.result_json.decode() if request.result_json else None, "error": error,
            "fatal": request.fatal,
            "duration_s": request.duration.ToNanoseconds() / 1e9 if request.HasField("duration") else None,
            "match": None, "version": request.version or None, "children": None, "on_failure": None}


def _as_response(answer: dict) -> wpb.StepResponse:
    response = wpb.StepResponse(status=STATUS[answer["status"]], attempt=answer["attempt"] or 0,
                                logged_name=answer["logged_name"] or "")
    if answer["result"] is not None:
        response.result_json = answer["result"].encode()
    if answer["error"]:
        response.error.CopyFrom(tasks_pb2.TaskError(error_class=answer["error"]["error_class"],
                                                    message=answer["error"]["message"]))
    if answer["wake_after_s"] is not None:
        response.wake_after.CopyFrom(duration_pb2.Duration(seconds=int(answer["wake_after_s"])))
    if answer["logged_kind"]:
        response.logged_kind = steps.KINDS[answer["logged_kind"]]
    if answer["compensate_from"] is not None:  # (with CANCELLED, as history answers)
        response.compensate_from = answer["compensate_from"]
    return response


@pytest.fixture
async def fakes(work_dir):
    server = grpc.aio.server()
    dispatcher, control = LogDispatcher(), FakeControl()
    worker_pb2_grpc.add_DispatchServiceServicer_to_server(dispatcher, server)
    control_pb2_grpc.add_ControlServiceServicer_to_server(control, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    control.deploy("app-1", {"app.py": APP})
    agent = HostAgent(agent_config(port, work_dir))
    await agent.start()
    yield dispatcher
    await asyncio.wait_for(agent.stop(grace_s=0.5), 30)
    await server.stop(0)


def rows(dispatcher: LogDispatcher, task_id: str) -> list[tuple]:
    return [(r.position, r.kind, r.name, r.status, r.attempt) for r in dispatcher.logs[task_id].steps]


async def test_a_cancelled_run_replays_to_its_sleep_compensates_last_first_and_completes_canceled(fakes):
    dispatcher = fakes
    first = dispatcher.enqueue("book", "false", lease_epoch=1)
    c = await dispatcher.completion_for(first.task_id, lease_epoch=1)
    assert (c.outcome, c.suspend_position) == (wpb.COMPLETION_OUTCOME_SUSPENDED, 4), c
    logged = dispatcher.logs[first.task_id].steps
    assert [(r.kind, r.name) for r in logged] == [("step", "reserve"), ("on_cancel", "release"),
                                                  ("step", "charge"), ("on_cancel", "refund"),
                                                  ("sleep", "until_departure")]
    assert logged[1].result_json == '{"args":["7A"],"kwargs":{}}' and logged[3].result_json is None  # ctx: not JSON

    dispatcher.cancel(first.task_id)
    dispatcher.steps.clear()
    dispatcher.enqueue("book", "false", task_id=first.task_id, lease_epoch=2, attempt=2)
    c = await dispatcher.completion_for(first.task_id, lease_epoch=2)
    assert c.outcome == wpb.COMPLETION_OUTCOME_CANCELED, c
    # The sleep the cancel interrupted keeps its entry; the compensations take the positions
    # after it (compensate_from 5, carried from the StepResponse through the agent to the stub).
    assert rows(dispatcher, first.task_id)[4:] == [(4, "sleep", "until_departure", "RUNNING", 1),
                                                   (5, "compensate", "compensate:refund", "COMPLETED", 1),
                                                   (6, "compensate", "compensate:release", "COMPLETED", 1)]
    assert json.loads(dispatcher.logs[first.task_id].steps[5].result_json) == {"refunded": 120, "step_attempt": 1}
    assert [(s.op, s.kind, s.position) for s in dispatcher.steps][4:] == [
        (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_SLEEP, 4),  # answered CANCELLED: nothing written
        (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_COMPENSATE, 5), (wpb.STEP_OP_COMMIT, wpb.STEP_KIND_COMPENSATE, 5),
        (wpb.STEP_OP_BEGIN, wpb.STEP_KIND_COMPENSATE, 6), (wpb.STEP_OP_COMMIT, wpb.STEP_KIND_COMPENSATE, 6)]
    assert {s.lease.lease_epoch for s in dispatcher.steps} == {2}


async def test_a_compensation_failing_retryably_fails_the_activation_and_the_next_runs_only_the_rest(fakes):
    dispatcher = fakes
    first = dispatcher.enqueue("book", "true", lease_epoch=1)
    assert (await dispatcher.completion_for(first.task_id, lease_epoch=1)).outcome == \
        wpb.COMPLETION_OUTCOME_SUSPENDED
    dispatcher.cancel(first.task_id)
    dispatcher.enqueue("book", "true", task_id=first.task_id, lease_epoch=2, attempt=2)
    c = await dispatcher.completion_for(first.task_id, lease_epoch=2)
    assert (c.outcome, c.fatal, c.error.error_class) == (wpb.COMPLETION_OUTCOME_FAILED, False, "ConnectionError"), c
    assert rows(dispatcher, first.task_id)[5:] == [(5, "compensate", "compensate:refund", "FAILED", 1)]

    dispatcher.enqueue("book", "true", task_id=first.task_id, lease_epoch=3, attempt=3)
    c = await dispatcher.completion_for(first.task_id, lease_epoch=3)
    assert c.outcome == wpb.COMPLETION_OUTCOME_CANCELED, c
    assert rows(dispatcher, first.task_id)[4:] == [(4, "sleep", "until_departure", "RUNNING", 1),
                                                   (5, "compensate", "compensate:refund", "COMPLETED", 2),
                                                   (6, "compensate", "compensate:release", "COMPLETED", 1)]
    assert json.loads(dispatcher.logs[first.task_id].steps[5].result_json) == {"refunded": 120, "step_attempt": 2}
