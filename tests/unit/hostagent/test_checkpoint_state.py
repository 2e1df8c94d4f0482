"""The agent's bookkeeping of checkpoints per lease, and the checks on
checkpoint frames from a sandbox (untrusted input)."""

from __future__ import annotations

import pathlib

import pytest

from ratchet.internal.worker.v1 import worker_pb2
from ratchet.sandbox.protocol import ProtocolError
from ratchet.services.hostagent import outcomes
from ratchet.services.hostagent.agent import Agent, Lease
from ratchet.services.hostagent.sandboxes import RunEnd, Sandbox, SandboxDirs, _Run

TASK = worker_pb2.LeasedTask(shard_id=2, task_id="t1", tenant_id="ten", app_id="app", task_type="resize",
                              lease_epoch=9, attempt=3)
CONTINUE, CANCEL = worker_pb2.LEASE_ACTION_CONTINUE, worker_pb2.LEASE_ACTION_CANCEL


async def _agent_with_lease() -> tuple[Agent, Lease]:
    agent = Agent(capacity=1, deployments=None, bundles=None, pool=None, submit=lambda c: None, steps=None)
    lease = Lease(TASK)
    agent._leases[TASK.task_id] = lease
    return agent, lease


def _result(action: int, reason: str = "") -> worker_pb2.HeartbeatResult:
    return worker_pb2.HeartbeatResult(task_id="t1", lease_epoch=9, action=action, reason=reason)


async def test_a_checkpoint_rides_heartbeats_until_history_acknowledges_it():
    agent, lease = await _agent_with_lease()
    [(ref, seq)] = agent.heartbeat_batch()
    assert not ref.HasField("checkpoint_json") and seq == 0
    agent._checkpoint(lease, b'{"n":1}')
    assert agent.heartbeat_wanted.is_set()
    [(ref, seq)] = agent.heartbeat_batch()
    assert ref.checkpoint_json == b'{"n":1}' and seq == 1
    agent._checkpoint(lease, b'{"n":2}')  # arrives while the beat carrying n=1 is in flight
    agent.on_heartbeat(_result(CONTINUE), checkpoint_seq=1)
    [(ref, seq)] = agent.heartbeat_batch()
    assert ref.checkpoint_json == b'{"n":2}' and seq == 2
    # The dispatcher's CONTINUE for an unreachable shard, and CANCEL, do not acknowledge.
    agent.on_heartbeat(_result(CONTINUE, "shard unavailable, lease unchanged"), checkpoint_seq=2)
    agent.on_heartbeat(_result(CANCEL, "cancel requested"), checkpoint_seq=2)
    assert lease.checkpoint_unacked
    agent.on_heartbeat(_result(CONTINUE), checkpoint_seq=2)
    [(ref, _)] = agent.heartbeat_batch()
    assert not ref.HasField("checkpoint_json") and not lease.checkpoint_unacked
    await agent.close()


async def test_one_heartbeat_carries_a_bounded_amount_of_checkpoints(monkeypatch):
    from ratchet.services.hostagent import agent as agent_module

    monkeypatch.setattr(agent_module, "HEARTBEAT_CHECKPOINT_BUDGET", 10)
    agent, lease = await _agent_with_lease()
    other = Lease(worker_pb2.LeasedTask(shard_id=2, task_id="t2", lease_epoch=1))
    agent._leases["t2"] = other
    agent._checkpoint(lease, b"12345678")
    agent._checkpoint(other, b"87654321")
    agent.heartbeat_wanted.clear()
    (first, seq1), (second, seq2) = agent.heartbeat_batch()
    assert first.checkpoint_json == b"12345678" and seq1 == 1
    assert not second.HasField("checkpoint_json") and seq2 == 0  # its turn comes next, and soon
    assert agent.heartbeat_wanted.is_set()
    await agent.close()


async def test_checkpoints_of_a_lost_lease_are_dropped():
    agent, lease = await _agent_with_lease()
    lease.lost = True
    agent._checkpoint(lease, b"1")
    assert lease.checkpoint is None and not agent.heartbeat_wanted.is_set()
    await agent.close()


def test_completions_name_tenant_app_and_task_type_whatever_the_outcome():
    done = outcomes.from_end(TASK, RunEnd(done={"outcome": "succeeded", "result": "1"}))
    crashed = outcomes.from_end(TASK, RunEnd(exit_status=-9))
    setup = outcomes.failed(TASK, "NoActiveDeployment", "none")
    for c in (done, crashed, setup):
        assert (c.tenant_id, c.app_id, c.task_type, c.lease_epoch) == ("ten", "app", "resize", 9)
    assert crashed.outcome == worker_pb2.COMPLETION_OUTCOME_CRASHED
    assert crashed.error.error_class == "SandboxCrashed"


@pytest.fixture
def sandbox(tmp_path: pathlib.Path) -> Sandbox:
    return Sandbox(app_id="app", digest="sha256:x", module="app", bundle_dir=tmp_path,
                   dirs=SandboxDirs.under(tmp_path))


@pytest.mark.parametrize("value, fragment", [
    (None, "JSON text"), ({"n": 1}, "JSON text"), ("{not json", "not valid JSON"),
    ('{"x": NaN}', "NaN is not JSON"),
    ('"' + "x" * 70_000 + '"', "over the 65536-byte limit"),
])
def test_malformed_checkpoint_frames_break_the_protocol(sandbox, value, fragment):
    with pytest.raises(ProtocolError, match=fragment):
        sandbox._on_message({"type": "checkpoint", "task_id": "t1", "value": value})


def test_checkpoints_reach_only_the_task_they_name(sandbox):
    got: dict[str, list[bytes]] = {"t1": [], "t2": []}
    for task_id in got:
        sandbox._runs[task_id] = _Run(1, None, got[task_id].append)
    sandbox._on_message({"type": "checkpoint", "task_id": "t1", "value": '{"n": 1}'})
    sandbox._on_message({"type": "checkpoint", "task_id": "t2", "value": "2"})
    sandbox._on_message({"type": "checkpoint", "task_id": "other", "value": "3"})
    assert got == {"t1": [b'{"n": 1}'], "t2": [b"2"]}


def test_a_task_killed_beside_another_is_failed_not_crashed():
    c = outcomes.killed_beside(TASK, "task x lost its lease")
    assert c.outcome == worker_pb2.COMPLETION_OUTCOME_FAILED and c.error.error_class == "SandboxCrashed"
    assert "task x lost its lease" in c.error.message and c.task_type == "resize"
