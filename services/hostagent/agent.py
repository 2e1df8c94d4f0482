"""The agent's leases: run each leased task in a sandbox, act on heartbeat
answers, and hand outcomes to the completion sender.

Slots: a lease holds a slot from the moment it is accepted until its
sandbox run ends. Its lease stays held (and heartbeated) until the
dispatcher has answered its completion, so a slow completion never lets the
lease expire under a finished task.

Checkpoints: the latest value a handler passed to ctx.checkpoint() is kept
per lease and rides on every heartbeat until history acknowledges it (a
CONTINUE without a reason: the dispatcher gives a reason when the shard was
not reached), and on the completion if it never was. A new one asks the
heartbeat loop for an early beat (`heartbeat_wanted`).

Workflow steps: a step frame from a run is sent as DispatchService.Step
under the lease held for its task (steps.py); the reply goes back to the
sandbox that asked, and answers "lost" when the agent no longer holds that
lease. A Step answered FAILED_PRECONDITION means history no longer counts
the lease: the agent drops it as it does on LEASE_LOST. A fan-out's children
are started under the lease's tenant and app; a reply too large for a frame
(a fan-out's outcomes) is answered with a fatal "error" instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable

from ratchet.internal.worker.v1 import worker_pb2
from ratchet.sandbox.protocol import ProtocolError
from ratchet.services.hostagent import outcomes, steps
from ratchet.services.hostagent.bundles import BundleStore
from ratchet.services.hostagent.control import Deployments
from ratchet.services.hostagent.errors import ControlUnavailable, task_error_for
from ratchet.services.hostagent.pool import SandboxPool
from ratchet.services.hostagent.sandboxes import RunEnd, Sandbox
from ratchet.services.hostagent.steps import StepClient, StepFrame

log = logging.getLogger(__name__)

# Used when a CANCEL carries no kill_after: the platform's default grace.
DEFAULT_KILL_AFTER_S = 30.0
# Checkpoint bytes one Heartbeat call may carry (1,000 leases x 64 KiB would pass the 64 MiB
# message limit); the rest wait for the next beat, which is then brought forward.
HEARTBEAT_CHECKPOINT_BUDGET = 8 * 1024 * 1024
# Longest pause between tries to reach the control service for a held lease.
CONTROL_RETRY_MAX_S = 2.0


@dataclasses.dataclass(eq=False)
class Lease:
    """A task the agent holds a lease on."""

    task: worker_pb2.LeasedTask
    running: bool = True  # holds a slot; False once its completion is queued
    sandbox: Sandbox | None = None
    cancel_requested: bool = False
    lost: bool = False  # LEASE_LOST, or killed after the cancel grace: discard the outcome
    kill_deadline: float | None = None
    kill_timer: asyncio.TimerHandle | None = None
    checkpoint: bytes | None = None  # the handler's latest, JSON
    checkpoint_seq: int = 0  # grows with every new checkpoint
    checkpoint_acked: int = 0  # the highest seq history acknowledged

    @property
    def checkpoint_unacked(self) -> bool:
        return self.checkpoint_seq > self.checkpoint_acked

    def ref(self, with_checkpoint: bool = True) -> worker_pb2.LeaseRef:
        ref = worker_pb2.LeaseRef(shard_id=self.task.shard_id, task_id=self.task.task_id,
                                   lease_epoch=self.task.lease_epoch)
        if with_checkpoint and self.checkpoint_unacked:
            ref.checkpoint_json = self.checkpoint
        return ref


class Agent:
    """Runs leased tasks in sandboxes of their app's active version."""

    def __init__(self, *, capacity: int, deployments: Deployments, bundles: BundleStore, pool: SandboxPool,
                 submit: Callable[[worker_pb2.Completion], None], steps: StepClient):
        self.capacity = capacity
        self._deployments, self._bundles, self._pool, self._submit = deployments, bundles, pool, submit
        self._steps = steps
        self._leases: dict[str, Lease] = {}
        self._busy = 0  # leases holding a slot (running), kept as a count: free_slots runs per poll
        self._slot_freed = asyncio.Event()
        self._runs: set[asyncio.Task] = set()
        # Set when a new checkpoint waits for a heartbeat; the heartbeat loop beats early for it.
        self.heartbeat_wanted = asyncio.Event()

    def free_slots(self) -> int:
        """Slots not taken by a running task."""
        return self.capacity - self._busy

    async def wait_for_slot(self) -> None:
        """Return once a slot may have freed up."""
        self._slot_freed.clear()
        if self.free_slots() <= 0:
            await self._slot_freed.wait()

    async def wait_for_free(self, want: int, timeout_s: float) -> None:
        """Return once `want` slots are free, or after timeout_s (the poll loop lingers
        like this so leases come in batches instead of one task per poll)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.free_slots() < want:
            left = deadline - loop.time()
            if left <= 0:
                return
            self._slot_freed.clear()
            try:
                await asyncio.wait_for(self._slot_freed.wait(), left)
            except TimeoutError:
                return

    def _release_slot(self, lease: Lease) -> None:
        if lease.running:
            lease.running = False
            self._busy -= 1
            self._slot_freed.set()

    def lease_refs(self) -> list[worker_pb2.LeaseRef]:
        """Every lease held, for the heartbeat."""
        return [ref for ref, _ in self.heartbeat_batch()]

    def heartbeat_batch(self) -> list[tuple[worker_pb2.LeaseRef, int]]:
        """Every lease held with the checkpoint seq its ref carries (pass it back
        to on_heartbeat; 0 when it carries none)."""
        batch, budget = [], HEARTBEAT_CHECKPOINT_BUDGET
        for lease in self._leases.values():
            fits = lease.checkpoint_unacked and len(lease.checkpoint or b"") <= budget
            if fits:
                budget -= len(lease.checkpoint or b"")
            elif lease.checkpoint_unacked:
                self.heartbeat_wanted.set()
            batch.append((lease.ref(with_checkpoint=fits), lease.checkpoint_seq if fits else 0))
        return batch

    def running(self) -> int:
        return self.capacity - self.free_slots()

    def accept(self, task: worker_pb2.LeasedTask) -> None:
        """Start running a task the dispatcher leased to this agent."""
        old = self._leases.get(task.task_id)
        if old is not None:
            if old.task.lease_epoch >= task.lease_epoch:
                log.warning("ignoring stale lease of task %s epoch %d", task.task_id, task.lease_epoch)
                return
            self._lose(old, f"superseded by lease epoch {task.lease_epoch}")
        lease = Lease(task)
        self._leases[task.task_id] = lease
        self._busy += 1
        sandbox = self._ready_sandbox(task)
        if sandbox is not None:
            # The common case, without a coroutine: the deployment, its bundle and a running
            # sandbox with room are all at hand (an asyncio task per lease and its resumptions
            # were a visible share of the agent's CPU per task in a drain; findings.md).
            self._start(lease, sandbox).add_done_callback(
                lambda f: None if f.cancelled() else self._finish(lease, sandbox, f.result()))
            return
        run = asyncio.ensure_future(self._run(lease))
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)

    def _ready_sandbox(self, task: worker_pb2.LeasedTask) -> Sandbox | None:
        """A sandbox for the task if nothing needs waiting for (a deployment look-up, a bundle
        fetch, a sandbox start), reserved as _prepare's would be; else None."""
        deployment = self._deployments.cached(task.app_id)
        if deployment is None or self._bundles.known(deployment.digest) is None:
            return None
        return self._pool.try_acquire(task.app_id, deployment.digest, task.task_type)

    async def _prepare(self, task: worker_pb2.LeasedTask) -> Sandbox:
        deployment = await self._deployments.active(task.app_id)
        bundle_dir = await self._bundles.ensure(deployment.digest)
        return await self._pool.acquire(task.app_id, deployment.digest, deployment.module, bundle_dir,
                                        task.task_type)

    async def _prepare_held(self, lease: Lease) -> Sandbox:
        """_prepare, waiting out a control-plane outage while the lease is held.

        The handler has not run, so an unreachable control service must not
        spend the task's attempt (found by the fault harness: a gateway outage
        sent tasks that never ran to FAILED). Heartbeats keep the lease while we
        wait; a cancel, a lost lease or the server's start_to_close ends it.
        """
        delay = 0.1
        while True:
            try:
                return await self._prepare(lease.task)
            except ControlUnavailable as e:
                if lease.lost or lease.cancel_requested:
                    raise
                log.info("task %s: waiting for the control service (%s); retrying in %.1fs",
                         lease.task.task_id, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, CONTROL_RETRY_MAX_S)

    async def _run(self, lease: Lease) -> None:
        task = lease.task
        try:
            sandbox = await self._prepare_held(lease)
        except Exception as e:  # noqa: BLE001 -- any failure to set up becomes the attempt's error
            error_class, message = task_error_for(e)
            log.warning("task %s: cannot run attempt %d: %s: %s", task.task_id, task.attempt, error_class, message)
            if not lease.lost:
                self._complete(lease, outcomes.failed(task, error_class, message))
            return
        if lease.lost:
            self._pool.release(sandbox)
            return
        self._finish(lease, sandbox, await self._start(lease, sandbox))

    def _start(self, lease: Lease, sandbox: Sandbox) -> asyncio.Future:
        """Hand the task to its sandbox; the future gets the run's end (for _finish)."""
        lease.sandbox = sandbox
        return sandbox.start_run(self._run_frame(lease.task), cancel=lease.cancel_requested,
                                 on_checkpoint=lambda data: self._checkpoint(lease, data),
                                 on_step=lambda frame: self._step(lease, sandbox, frame))

    def _finish(self, lease: Lease, sandbox: Sandbox, end: RunEnd) -> None:
        """The run in the sandbox ended: the completion it makes, and the sandbox given back."""
        task = lease.task
        lease.sandbox = None
        if lease.lost:
            # Its outcome no longer counts; the sandbox was retired (never reused) when the
            # lease was lost, and goes once nothing else worth running is left in it.
            self._pool.release(sandbox)
            return
        if end.done is None and end.protocol_error is None and sandbox.killed_for:
            completion = outcomes.killed_beside(task, sandbox.killed_for)
        else:
            if end.done is None and end.protocol_error is None:
                # The process died on its own with this task in it: its type runs alone for a
                # while, so its next crash is its own (every task the process ran reports here).
                self._pool.crashed(task.app_id, task.task_type)
            completion = outcomes.from_end(task, end, sandbox.log_tail() if end.done is None else "")
        if lease.checkpoint_unacked:
            completion.checkpoint_json = lease.checkpoint
        if end.done is not None and completion.error.error_class != outcomes.SANDBOX_PROTOCOL:
            self._pool.release(sandbox)
        else:
            sandbox.kill(f"task {task.task_id} broke the protocol")
            log.warning("task %s: %s", task.task_id, completion.error.message)
        self._complete(lease, completion)

    def _checkpoint(self, lease: Lease, data: bytes) -> None:
        if lease.lost or not lease.running:
            return
        lease.checkpoint = data
        lease.checkpoint_seq += 1
        self.heartbeat_wanted.set()

    def _step(self, lease: Lease, sandbox: Sandbox, frame: StepFrame) -> None:
        """A step frame from the run of `lease`: answered in the background, to `sandbox`."""
        if lease.lost or self._leases.get(lease.task.task_id) is not lease:
            sandbox.send(steps.lost("the agent no longer holds the run's lease").frame(frame.task_id, frame.call))
            return
        call = asyncio.ensure_future(self._step_call(lease, sandbox, frame))
        self._runs.add(call)
        call.add_done_callback(self._runs.discard)

    async def _step_call(self, lease: Lease, sandbox: Sandbox, frame: StepFrame) -> None:
        # The lease is the agent's, added here: the stub never sees shard, task lease or epoch.
        request = frame.under(lease.ref(with_checkpoint=False))
        owner = steps.Owner(tenant_id=lease.task.tenant_id, app_id=lease.task.app_id)
        try:
            reply = await self._steps.step(request, held=lambda: not lease.lost, owner=owner)
        except Exception as e:  # the stub waits for an answer: a bug here must still give one
            log.exception("task %s: step at position %d failed in the agent", lease.task.task_id,
                          frame.request.position)
            reply = steps.Reply("error", message=f"the host agent failed to send the step: {type(e).__name__}")
        if lease.lost and reply.status != "lost":
            reply = steps.lost("the run's lease was lost while the step was answered")
        try:
            sandbox.send(steps.fitted(reply, frame.task_id, frame.call))
        except ProtocolError as e:  # over the frame limit: the stub must still get an answer
            log.warning("task %s: the reply to the step at position %d does not fit a frame: %s",
                        lease.task.task_id, frame.request.position, e)
            sandbox.send(steps.too_large(reply, str(e)).frame(frame.task_id, frame.call))
        if reply.status == "lost" and not lease.lost:
            self._lose(lease, f"workflow step at position {frame.request.position}: {reply.message}")

    @staticmethod
    def _run_frame(task: worker_pb2.LeasedTask) -> dict:
        # Only what the handler needs: no lease id, no shard, no credential.
        scheduled = (task.scheduled_time.ToDatetime(tzinfo=dt.UTC).isoformat()
                     if task.HasField("scheduled_time") else None)
        last = task.last_checkpoint_json.decode("utf-8", "replace") if task.HasField("last_checkpoint_json") else None
        return {"type": "run", "task_id": task.task_id, "attempt": task.attempt,
                "max_attempts": task.max_attempts, "lease_epoch": task.lease_epoch,
                "task_type": task.task_type, "payload": task.payload_json.decode("utf-8", "replace"),
                "last_checkpoint": last, "schedule_id": task.schedule_id or None, "scheduled_time": scheduled}

    def _complete(self, lease: Lease, completion: worker_pb2.Completion) -> None:
        self._disarm(lease)
        self._release_slot(lease)
        self._submit(completion)

    def settled(self, task_id: str, lease_epoch: int) -> None:
        """The dispatcher answered (or we gave up on) this lease's completion."""
        lease = self._leases.get(task_id)
        if lease is not None and lease.task.lease_epoch == lease_epoch and not lease.running:
            del self._leases[task_id]

    def on_heartbeat(self, result: worker_pb2.HeartbeatResult, checkpoint_seq: int = 0) -> None:
        """Act on the dispatcher's answer for one lease; checkpoint_seq is what
        heartbeat_batch said the lease's ref carried."""
        lease = self._leases.get(result.task_id)
        if lease is None or lease.task.lease_epoch != result.lease_epoch:
            return
        if result.action == worker_pb2.LEASE_ACTION_CONTINUE and not result.reason:
            # History extended the lease, and stored the checkpoint under the same fence.
            lease.checkpoint_acked = max(lease.checkpoint_acked, checkpoint_seq)
        if result.action == worker_pb2.LEASE_ACTION_LEASE_LOST:
            self._lose(lease, result.reason or "lease lost")
        elif result.action == worker_pb2.LEASE_ACTION_CANCEL and lease.running:
            kill_after = (result.kill_after.ToTimedelta().total_seconds() if result.HasField("kill_after")
                          else DEFAULT_KILL_AFTER_S)
            self._cancel(lease, kill_after, result.reason)

    def _cancel(self, lease: Lease, kill_after: float, reason: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, kill_after)
        if not lease.cancel_requested:
            lease.cancel_requested = True
            log.info("task %s: cancel (%s); kill in %.3gs", lease.task.task_id, reason or "requested", kill_after)
            if lease.sandbox is not None:
                lease.sandbox.send({"type": "cancel", "task_id": lease.task.task_id})
        if lease.kill_deadline is None or deadline < lease.kill_deadline:
            if lease.kill_timer:
                lease.kill_timer.cancel()
            lease.kill_deadline = deadline
            lease.kill_timer = loop.call_at(deadline, self._lose, lease, "handler ignored cancel past kill_after")

    def _disarm(self, lease: Lease) -> None:
        if lease.kill_timer is not None:
            lease.kill_timer.cancel()
            lease.kill_timer = None

    def _lose(self, lease: Lease, reason: str) -> None:
        """Stop a task whose outcome no longer counts: kill its sandbox, forget the lease."""
        self._disarm(lease)
        if self._leases.get(lease.task.task_id) is lease:
            del self._leases[lease.task.task_id]
        if lease.lost:
            return
        lease.lost = True
        if not lease.running:  # its completion is already on its way; history decides
            log.debug("task %s epoch %d: %s while its completion is in flight", lease.task.task_id,
                      lease.task.lease_epoch, reason)
            return
        log.warning("task %s epoch %d: %s; discarding its outcome", lease.task.task_id, lease.task.lease_epoch,
                    reason)
        if lease.sandbox is not None:
            self._pool.retire(lease.sandbox, lease.task.task_id, f"task {lease.task.task_id}: {reason}")
        self._release_slot(lease)

    async def drain(self, timeout_s: float) -> None:
        """Wait up to timeout_s for running tasks to end (used on shutdown)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.running() > 0:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            self._slot_freed.clear()
            try:
                await asyncio.wait_for(self._slot_freed.wait(), left)
            except TimeoutError:
                return

    async def close(self) -> None:
        """Abandon every lease (they expire on the server) and stop the runs."""
        for lease in list(self._leases.values()):
            self._disarm(lease)
            lease.lost = True
            self._release_slot(lease)
        self._leases.clear()
        for run in list(self._runs):
            run.cancel()
        await asyncio.gather(*self._runs, return_exceptions=True)
