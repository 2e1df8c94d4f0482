"""Checkpoints, schedule fields, retry hints and what completions say about
the lease: the host agent's side of issue 4, against the fake dispatcher."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest
from google.protobuf import timestamp_pb2

from ratchet.internal.worker.v1 import worker_pb2
from ratchet.services.hostagent.server import HostAgent
from tests.integration.hostagent.conftest import agent_config
from tests.integration.hostagent.test_agent_stops_tasks import sandbox_of, until

OUTCOME = worker_pb2.CompletionOutcome
UNCHANGED = "shard unavailable, lease unchanged"  # the dispatcher's CONTINUE when history was not reached


@pytest.fixture
async def slow_agent(fakes, work_dir):
    """An agent whose regular heartbeat is 30 s away: any earlier beat is an early one."""
    port, _dispatcher, _control = fakes
    host_agent = HostAgent(agent_config(port, work_dir, heartbeat_interval_s=30.0))
    await host_agent.start()
    yield host_agent
    await asyncio.wait_for(host_agent.stop(grace_s=0.5), 30)


def _what(c: worker_pb2.Completion) -> tuple:
    return OUTCOME.Name(c.outcome), c.tenant_id, c.app_id, c.task_type


async def test_a_checkpoint_rides_the_next_heartbeat_and_once_acknowledged_not_the_completion(agent, fakes):
    _, dispatcher, _ = fakes
    task = dispatcher.enqueue("backfill", json.dumps({"to": 3, "pause": 0.15}))
    c = await dispatcher.completion_for(task.task_id)
    assert _what(c) == ("COMPLETION_OUTCOME_SUCCEEDED", "tenant-1", "app-1", "backfill")
    sent = [json.loads(b) for b in dispatcher.checkpoints_sent(task.task_id)]
    assert sent and sent[-1] == {"next": 3} and sent == sorted(sent, key=lambda v: v["next"])
    # Each value rode heartbeats only until one was answered CONTINUE: no endless resending.
    assert len(sent) <= 3 + 1
    assert not c.HasField("checkpoint_json")


async def test_an_unacknowledged_checkpoint_goes_on_the_completion(agent, fakes):
    _, dispatcher, _ = fakes
    task = dispatcher.enqueue("backfill", json.dumps({"to": 2, "pause": 0.35}))
    dispatcher.answer(task.task_id, worker_pb2.LEASE_ACTION_CONTINUE, reason=UNCHANGED)
    c = await dispatcher.completion_for(task.task_id)
    assert json.loads(c.checkpoint_json) == {"next": 2}
    # Not acknowledged, so every heartbeat (0.1 s apart) kept carrying the latest one.
    sent = [json.loads(b) for b in dispatcher.checkpoints_sent(task.task_id)]
    assert sent.count({"next": 1}) >= 2 and sent.count({"next": 2}) >= 2


async def test_a_checkpoint_brings_the_heartbeat_forward_at_most_once_a_second(slow_agent, fakes):
    _, dispatcher, _ = fakes
    loop = asyncio.get_running_loop()
    task = dispatcher.enqueue("ticker", "2.5")
    started = loop.time()
    await until(lambda: dispatcher.checkpoints_sent(task.task_id), timeout=5, what="an early heartbeat")
    assert loop.time() - started < 2.0  # the regular one is 30 s away
    c = await dispatcher.completion_for(task.task_id)
    beats = [hb for hb in dispatcher.heartbeats if any(r.task_id == task.task_id for r in hb.leases)]
    # ~250 checkpoints in 2.5 s: one early beat a second at most (plus the start-up rounding).
    assert 1 <= len(beats) <= 3
    # The value taken after the last beat was not acknowledged: the completion carries it.
    assert json.loads(c.checkpoint_json) == json.loads(c.result_json)


async def test_a_killed_task_resumes_from_its_cursor(agent, fakes):
    _, dispatcher, _ = fakes
    first = dispatcher.enqueue("backfill", json.dumps({"to": 10_000, "pause": 0.02}))
    await until(lambda: any(json.loads(b)["next"] >= 5 for b in dispatcher.checkpoints_sent(first.task_id)),
                what="progress checkpointed")
    os.kill(sandbox_of(agent, first.task_id).pid, signal.SIGKILL)
    crashed = await dispatcher.completion_for(first.task_id)
    # The breaker's input: a crash, attributed to its tenant, app and task type.
    assert _what(crashed) == ("COMPLETION_OUTCOME_CRASHED", "tenant-1", "app-1", "backfill")
    assert crashed.error.error_class == "SandboxCrashed"
    # What history would hold: the completion's checkpoint if it carries one, else the last heartbeat's.
    stored = (crashed.checkpoint_json if crashed.HasField("checkpoint_json")
              else dispatcher.checkpoints_sent(first.task_id)[-1])
    cursor = json.loads(stored)["next"]
    second = dispatcher.enqueue("backfill", json.dumps({"to": cursor + 3}), task_id=first.task_id, attempt=2,
                                last_checkpoint_json=stored)
    done = await dispatcher.completion_for(first.task_id, lease_epoch=second.lease_epoch)
    assert OUTCOME.Name(done.outcome) == "COMPLETION_OUTCOME_SUCCEEDED"
    assert json.loads(done.result_json) == {"started_at": cursor, "attempt": 2}


async def test_last_checkpoint_and_schedule_reach_the_handler(agent, fakes):
    _, dispatcher, _ = fakes
    slot = timestamp_pb2.Timestamp(seconds=1_767_225_600)  # 2026-01-01T00:00:00Z
    task = dispatcher.enqueue("resume", last_checkpoint_json=b'{"offset": 7, "ids": [1, 2]}',
                              schedule_id="sched-1", scheduled_time=slot)
    got = json.loads((await dispatcher.completion_for(task.task_id)).result_json)
    assert got == {"last": {"offset": 7, "ids": [1, 2]}, "schedule_id": "sched-1",
                   "scheduled_time": "2026-01-01T00:00:00+00:00", "tz": "UTC"}
    plain = dispatcher.enqueue("resume")
    got = json.loads((await dispatcher.completion_for(plain.task_id)).result_json)
    assert got == {"last": None, "schedule_id": None, "scheduled_time": None, "tz": None}


async def test_retry_after_and_fatal_rules_reach_the_completion(agent, fakes):
    _, dispatcher, _ = fakes
    later, value, key = (dispatcher.enqueue("later"), dispatcher.enqueue("picky", '"value"'),
                         dispatcher.enqueue("picky", '"key"'))
    c = await dispatcher.completion_for(later.task_id)
    assert c.error.error_class == "RetryableError" and not c.fatal
    assert c.retry_after.ToTimedelta().total_seconds() == 30
    c = await dispatcher.completion_for(value.task_id)
    assert (c.error.error_class, c.fatal) == ("ValueError", True)  # rule "fatal"
    c = await dispatcher.completion_for(key.task_id)
    assert (c.error.error_class, c.fatal) == ("KeyError", False)  # a policy rule: history applies it
    assert not c.HasField("retry_after")
