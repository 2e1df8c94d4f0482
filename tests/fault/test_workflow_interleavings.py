"""Forced interleavings of workflow step ops on history (real shard databases, real gRPC),
judged by the fault checker, shipped and mutant (tests/fault/mutants).

A zombie activation: lease 1 claims a step and runs it, its lease expires, lease 2 claims the
step again and runs it, and lease 1's late COMMIT arrives only then. On one host agent the
chaos runs cannot order these ops so (a zombie's ops reach history before its successor's: the
chaos run of the mutant shows its late commits through `wf_step_fenced` instead), so the test
plays both activations itself and records their executions as the fault app does; the checker
then reads the shards' dump. Shipped, the zombie's commit is refused and the log holds
lease 2's result; the mutant without the step fence (`step_lease_fence`) accepts it onto lease
2's claim, and `wf_step_once` must say so. `step_begin_memoized` is proven the same way (a
committed step claimed again), besides its chaos run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import grpc
import pytest

from ratchet.internal.history.v1 import history_pb2 as h
from ratchet.internal.worker.v1 import worker_pb2 as wpb
from tests.fault.checker import Run, check
from tests.fault.checker.__main__ import summary
from tests.fault.harness.dump import TABLES, _dump_shard
from tests.fault.mutants.mutations import MUTATIONS, installed, missing_parts
from tests.integration.history.conftest import _new_dbs, start_hist, stop_hist
from tests.integration.history.helpers import RPC_TIMEOUT, Hist, eventually

pytestmark = pytest.mark.timeout(120)
TYPE = "flow_two"
LAYOUT = {TYPE: [["v", "VERSION"], ["charge", "STEP"]]}
WF = ["tests.fault.checker.invariants.workflows"]


def needs(mutation: str):
    missing = missing_parts(MUTATIONS[mutation])
    return pytest.mark.skipif(bool(missing), reason=f"{mutation} cuts code that has not landed: {missing}")


class Activation:
    """One lease of the run, doing what the SDK's stub and the fault app's step do."""

    def __init__(self, hist: Hist, leased: wpb.LeasedTask, ledger: list[dict]):
        self.hist, self.leased, self.ledger = hist, leased, ledger
        self.read_ahead: list[int] = []  # positions a DONE reply carried ahead

    async def op(self, op: str, position: int, name: str, kind: str = "STEP", **kw) -> wpb.StepResponse:
        lease = wpb.LeaseRef(shard_id=self.leased.shard_id, task_id=self.leased.task_id,
                             lease_epoch=self.leased.lease_epoch)
        req = wpb.StepRequest(lease=lease, op=wpb.StepOp.Value(f"STEP_OP_{op}"), position=position, name=name,
                              kind=wpb.StepKind.Value(f"STEP_KIND_{kind}"), **kw)
        return (await self.hist.stub.WorkflowStep(h.WorkflowStepRequest(step=req), timeout=RPC_TIMEOUT)).step

    def record(self, phase: str, **extra) -> None:
        self.ledger.append({"task_id": self.leased.task_id, "phase": phase, "position": 1, "name": "charge",
                            "lease_epoch": self.leased.lease_epoch, "attempt": self.leased.attempt,
                            "time": time.time(), **extra})

    async def claim_and_run(self) -> int:
        """version marker, BEGIN charge (RUN), the side effect; returns the claim's step attempt."""
        await self.op("BEGIN", 0, "v", "VERSION", version=1)
        r = await self.op("BEGIN", 1, "charge")
        assert r.status == wpb.STEP_STATUS_RUN, r
        self.record("step", step_attempt=r.attempt)
        self.record("step_end", step_attempt=r.attempt, outcome="ok")
        return r.attempt

    async def commit(self, attempt: int) -> wpb.StepResponse | grpc.StatusCode:
        result = {"position": 1, "name": "charge", "lease_epoch": self.leased.lease_epoch, "step_attempt": attempt}
        try:
            r = await self.op("COMMIT", 1, "charge", result_json=json.dumps(result).encode())
        except grpc.aio.AioRpcError as e:
            return e.code()
        got = json.loads(r.result_json)
        self.record("step_done", outcome="ok", result_epoch=got["lease_epoch"], result_attempt=got["step_attempt"])
        return r


async def _zombie_commit_run(hist: Hist) -> tuple[Run, object, object]:
    """The interleaving; returns (the run for the checker, the zombie's answer, the successor's)."""
    tenant, app, ledger = "t-zombie", "app-zombie", []
    run_id = await hist.create_one(tenant, app, task_type=TYPE, payload=b'{"op": "z-1"}', base_s=0.01)
    first = Activation(hist, await hist.lease_one(app, lease_s=0.5), ledger)
    attempt1 = await first.claim_and_run()
    await hist.fire_until_state(run_id, tenant, "ENQUEUED", timeout=10)  # lease 1 expired: a zombie now

    async def leased() -> bool:
        r = await hist.lease(app, max_tasks=1, lease_s=30)
        box.extend(r.tasks)
        return bool(box)
    box: list = []
    await eventually(leased, 10)
    second = Activation(hist, box[0], ledger)
    attempt2 = await second.claim_and_run()
    zombie = await first.commit(attempt1)  # lease 1's late commit, after lease 2's claim
    successor = await second.commit(attempt2)
    value = json.loads(successor.result_json) if isinstance(successor, wpb.StepResponse) else None
    done = await hist.complete_one(second.leased, "SUCCEEDED",
                                   result_json=json.dumps({"op": "z-1", "steps": {"1": value}}).encode())
    assert done.accepted, done
    return await _as_run(hist, run_id, ledger), zombie, successor


async def _as_run(hist: Hist, run_id: str, ledger: list[dict]) -> Run:
    """The shards' dump (as the harness takes it) plus a client history holding the run's start."""
    shards = await asyncio.gather(*(_dump_shard(dsn, TABLES) for dsn in hist.dsns.values()))
    dump = {"db_now": max(now for _, now in shards),
            "shards": {str(k): tables for k, (tables, _) in zip(hist.dsns, shards, strict=True)}}
    history = [{"process": "c0", "type": "invoke", "f": "start_workflow", "value": {"op": "z-1"}, "time": 0.0},
               {"process": "c0", "type": "ok", "f": "start_workflow", "value": {"op": "z-1", "task_id": run_id},
                "time": 0.1}]
    return Run.from_parts(history, ledger, dump, {"workflow_layouts": LAYOUT, "scenario": "zombie_commit"})


@contextlib.asynccontextmanager
async def _history(pg_cluster, mutation: str | None):
    """A private history server on fresh shards, shipped (None) or that mutant."""
    with installed(mutation) if mutation else contextlib.nullcontext():
        hist = await start_hist(_new_dbs(pg_cluster))
        try:
            yield hist
        finally:
            await stop_hist(hist, check_logs=False)


@needs("step_lease_fence")
async def test_a_zombie_commit_after_its_successors_claim_is_refused(pg_cluster):
    async with _history(pg_cluster, None) as hist:
        run, zombie, successor = await _zombie_commit_run(hist)
    assert zombie == grpc.StatusCode.FAILED_PRECONDITION
    assert isinstance(successor, wpb.StepResponse) and successor.status == wpb.STEP_STATUS_DONE
    verdict = check(run, modules=WF)
    assert verdict["valid"], summary(verdict)
    claims = verdict["invariants"]["wf_step_claims"]["counts"]
    assert claims["re_executions"] == 1 and claims["why"] == {"lease_expired": 1}
    assert claims["duplicate_side_effects"] == 1  # the zombie's side effect happened: at-least-once


@needs("step_lease_fence")
async def test_the_mutant_without_the_step_fence_is_caught(pg_cluster):
    async with _history(pg_cluster, "step_lease_fence") as hist:
        run, zombie, _ = await _zombie_commit_run(hist)
    assert isinstance(zombie, wpb.StepResponse) and zombie.status == wpb.STEP_STATUS_DONE  # accepted
    verdict = check(run, modules=WF)
    assert not verdict["valid"], summary(verdict)
    problems = " | ".join(c["problem"] for c in verdict["invariants"]["wf_step_once"]["counterexamples"])
    assert "holds the result of lease 1 (step attempt 1) but its claim is lease 2 attempt 2" in problems, problems


async def _memo_run(hist: Hist) -> tuple[Run, wpb.StepResponse]:
    """A step committed under lease 1; the activation suspends; lease 2 begins it again."""
    tenant, app, ledger = "t-memo", "app-memo", []
    run_id = await hist.create_one(tenant, app, task_type=TYPE, payload=b'{"op": "m-1"}')
    first = Activation(hist, await hist.lease_one(app, lease_s=30), ledger)
    await first.commit(await first.claim_and_run())
    assert (await hist.complete_one(first.leased, "SUSPENDED", suspend_position=1)).accepted
    await hist.fire_until_state(run_id, tenant, "ENQUEUED", timeout=10)  # (nothing awaited: woken at once)
    second = Activation(hist, await hist.lease_one(app, lease_s=30), ledger)
    marker = await second.op("BEGIN", 0, "v", "VERSION", version=1)
    # The memo's other form: the DONE carries the completed step after it, which the SDK answers
    # from without a BEGIN; the mutant carries no step, so the BEGIN below is what the SDK sends.
    second.read_ahead = [e.position for e in marker.ahead]
    again = await second.op("BEGIN", 1, "charge")
    if again.status == wpb.STEP_STATUS_RUN:  # (the mutant) the side effect runs again
        second.record("step", step_attempt=again.attempt)
        second.record("step_end", step_attempt=again.attempt, outcome="ok")
        await second.commit(again.attempt)
    else:
        got = json.loads(again.result_json)
        second.record("step_done", outcome="ok", result_epoch=got["lease_epoch"], result_attempt=got["step_attempt"])
    return await _as_run(hist, run_id, ledger), again, second.read_ahead


@needs("step_begin_memoized")
@pytest.mark.parametrize("mutation", [None, "step_begin_memoized"])
async def test_a_committed_step_is_memoized_and_the_mutant_is_caught(pg_cluster, mutation):
    async with _history(pg_cluster, mutation) as hist:
        run, again, read_ahead = await _memo_run(hist)
    verdict = check(run, modules=WF, only=["wf_step_once", "wf_step_claims"])
    if mutation is None:
        assert read_ahead == [1]  # the committed step comes with the marker's DONE
        assert again.status == wpb.STEP_STATUS_DONE and verdict["valid"], summary(verdict)
    else:
        assert read_ahead == []
        assert again.status == wpb.STEP_STATUS_RUN and again.attempt == 2
        problems = " | ".join(c["problem"] for c in verdict["invariants"]["wf_step_once"]["counterexamples"])
        assert "a committed step re-executed" in problems, summary(verdict)


# -- a platform bug the chaos runs found (pause_history seed 11, wf_waiting): history deleted a run's
# open waits only when it ended from WAITING; a run cancelled from ENQUEUED or RETRY_WAIT kept them.


async def _open_wait(hist: Hist, tenant: str, app: str, timeout_s: float | None) -> tuple[str, Activation]:
    """A run whose activation opened a wait for "go" at position 1 (and got SUSPEND)."""
    run_id = await hist.create_one(tenant, app, task_type=TYPE, payload=b'{"op": "w-1"}', base_s=0.01)
    act = Activation(hist, await hist.lease_one(app, lease_s=30), [])
    await act.op("BEGIN", 0, "v", "VERSION", version=1)
    kw = {"duration": _duration(timeout_s)} if timeout_s is not None else {}
    r = await act.op("BEGIN", 1, "go", "WAIT", match_json=b"{}", **kw)
    assert r.status == wpb.STEP_STATUS_SUSPEND, r
    return run_id, act


def _duration(seconds: float):
    from ratchet.services.history.policy import duration

    return duration(seconds)


async def _waits(hist: Hist, run_id: str) -> list:
    return [tuple(r) for r in await hist.sql(1, "SELECT position, name FROM workflow_waits "
                                                "WHERE workflow_id = $1::uuid", run_id)]


async def _ended_with_open_wait(hist: Hist, how: str, tenant: str) -> str:
    """A run cancelled while not WAITING but with a wait open: after the wait timed out (its wake timer
    made the run ENQUEUED; the step stays RUNNING until the next activation's BEGIN fails it), or
    after the activation that opened an untimed wait crashed before suspending (RETRY_WAIT)."""
    run_id, act = await _open_wait(hist, tenant, f"app-{tenant}", timeout_s=0.2 if how == "timed_out" else None)
    if how == "timed_out":
        assert (await hist.complete_one(act.leased, "SUSPENDED", suspend_position=1,
                                        wake_after=_duration(0.2))).accepted
        await hist.fire_until_state(run_id, tenant, "ENQUEUED", timeout=10)
    else:
        assert (await hist.complete_one(act.leased, "CRASHED", retry_after=_duration(30))).accepted
    await hist.cancel(run_id, tenant)
    assert await hist.state(run_id, tenant) == "CANCELED"
    return run_id


@pytest.mark.parametrize("how", ["timed_out", "crashed"])
async def test_a_run_cancelled_with_a_wait_open_keeps_no_open_wait(pg_cluster, how):
    async with _history(pg_cluster, None) as hist:
        run_id = await _ended_with_open_wait(hist, how, f"t-leak-{how}")
        assert await _waits(hist, run_id) == []


async def test_a_broadcast_does_not_count_a_run_that_ended(pg_cluster):
    """The leaked wait of a cancelled run (above) takes no broadcast: delivered 0, and the probe drops it."""
    async with _history(pg_cluster, None) as hist:
        run_id = await _ended_with_open_wait(hist, "crashed", "t-dead")
        req = h.DeliverEventRequest(shard_id=1, tenant_id="t-dead", name="go", data_json=b"{}")
        assert (await hist.stub.DeliverEvent(req, timeout=RPC_TIMEOUT)).delivered == 0
        rows = await hist.sql(1, "SELECT state FROM workflow_steps WHERE workflow_id = $1::uuid AND position = 1",
                              run_id)
        assert [r["state"] for r in rows] == ["RUNNING"]  # the dead run's wait was not completed
