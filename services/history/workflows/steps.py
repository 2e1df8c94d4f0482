"""The fenced step protocol: one StepRequest, one transaction (the protocol doc's "Step
semantics").

Every op first locks the run's task row FOR SHARE while it is LEASED under the request's
lease epoch: a lease that is not current writes nothing (FAILED_PRECONDITION). The log's row
at the position is then locked, so a resent op of the same run waits for the first and
answers what it left; events lock the task row FOR NO KEY UPDATE, so an event and the op it
races (a wait's BEGIN, say) never interleave.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

import asyncpg

from ratchet.libs.rpc.errors import FailedPrecondition
from ratchet.services.history.errors import Contention, InvalidArgument
from ratchet.services.history.model import ErrorInfo
from ratchet.services.history.store import Store, Tx
from ratchet.services.history.store.rows import StepRow
from ratchet.services.history.workflows import fanout
from ratchet.services.history.workflows.convert import StepOp

TIMEOUT_ERROR_CLASS = "TimeoutError"
# A DONE's page of the log ahead (StepResponse.ahead): at most this many entries and bytes of
# results. Only a position logged before is read ahead: a new one has nothing after it.
AHEAD_ROWS = 500
AHEAD_BYTES = 1024 * 1024


class LeaseNotCurrent(FailedPrecondition):
    """The run is not LEASED under the request's lease epoch: the activation must stop."""

    def __init__(self, task_id: str, epoch: int):
        super().__init__(f"the run's lease {epoch} is not current (run {task_id}); stop this activation")


@dataclasses.dataclass(frozen=True)
class StepAnswer:
    """What the run does at the step: RUN, DONE, SUSPEND, MISMATCH, ABSENT or CANCELLED."""

    status: str
    attempt: int = 0
    result: bytes | None = None
    error: ErrorInfo | None = None
    wake_after_s: float | None = None
    logged_name: str = ""
    logged_kind: str = ""
    child_ids: tuple[str, ...] = ()  # RUN of a fan-out: the children to start
    children: tuple[fanout.Outcome, ...] = ()  # DONE of a fan-out: how they ended, by index
    compensate_from: int = 0  # CANCELLED: the position the compensations take from
    # DONE of a logged position: the completed entries right after it (position, name, kind,
    # attempt, result), so a resuming run answers its next calls without a round trip each.
    ahead: tuple[tuple[int, str, str, int, bytes | None], ...] = ()


def _done(row: StepRow) -> StepAnswer:
    """DONE with what the log holds (a result, or the error of a failed step or a timed-out wait)."""
    err = ErrorInfo(row.error_class, row.error_message or "", row.error_stack or "") if row.error_class else None
    return StepAnswer("DONE", attempt=row.attempt, result=row.result if err is None else None, error=err)


def _timeout(name: str) -> ErrorInfo:
    return ErrorInfo(TIMEOUT_ERROR_CLASS, f"no event {name!r} matching the wait came before its timeout")


async def run_step(conn: asyncpg.Connection, store: Store, op: StepOp) -> StepAnswer:
    """Apply one step op under the run's lease."""
    async with store.tx(conn) as tx:
        share = await tx.workflow_lease_share(op.task_id, op.lease_epoch)
        if share is None:
            raise LeaseNotCurrent(op.task_id, op.lease_epoch)
        tenant, cancelled = share
        if op.kind == "COMPENSATE" and not cancelled:
            raise NotCancelled(op.task_id, op.position)
        if op.op == "COMMIT":
            return await _commit(tx, op)
        for _ in range(2):  # a second pass only when a concurrent op inserted the position first
            row = await tx.workflow_step_lock(op.task_id, op.position)
            if row is None and op.position > 0 and not await tx.workflow_step_exists(op.task_id, op.position - 1):
                raise InvalidArgument(f"step.position {op.position} is past the end of the run's step log "
                                      "(positions are dense: begin the steps before it first)")
            if cancelled and op.kind not in _GOES_ON_CANCELLED and not _logged_done(row):
                return _cancelled(op, row)
            answer = await _BEGIN[op.kind](tx, op, tenant, row)
            if answer is not None and answer.status == "DONE" and row is not None:
                ahead = await tx.workflow_steps_ahead(op.task_id, op.position, AHEAD_ROWS, AHEAD_BYTES)
                return dataclasses.replace(answer, ahead=tuple(ahead)) if ahead else answer
            if answer is not None:
                return answer
    raise Contention(f"step {op.position} of run {op.task_id} was begun concurrently")


_GOES_ON_CANCELLED = frozenset(("COMPENSATE", "ON_CANCEL"))  # kinds a cancelled run's BEGIN still takes


class NotCancelled(FailedPrecondition):
    """A COMPENSATE op of a run that holds no cancel: compensations run only after one."""

    def __init__(self, task_id: str, position: int):
        super().__init__(f"the run is not cancelled (run {task_id}, step {position}): a compensation runs only "
                         "after a cancel, when a BEGIN answered CANCELLED")


def _logged_done(row: StepRow | None) -> bool:
    """Whether a cancelled run's replay is answered from the log at this row: something completed
    before the cancel (not a compensation: that is the cancel point of an earlier activation)."""
    return (row is not None and row.kind != "COMPENSATE"
            and (row.state == "COMPLETED" or (row.state == "FAILED" and row.fatal)))


def _cancelled(op: StepOp, row: StepRow | None) -> StepAnswer:
    """The cancel point: the code goes no further; nothing is written. The compensations take
    positions from here when the log holds nothing or a compensation here, else from the next
    one (a sleep, wait, fan-out or claim left open here keeps its entry)."""
    start = op.position if row is None or row.kind == "COMPENSATE" else op.position + 1
    return StepAnswer("CANCELLED", attempt=row.attempt if row is not None else 0, compensate_from=start)


def _mismatch(op: StepOp, row: StepRow) -> StepAnswer | None:
    if row.name == op.name and row.kind == op.kind:
        return None
    return StepAnswer("MISMATCH", attempt=row.attempt, logged_name=row.name, logged_kind=row.kind)


async def _begin_step(tx: Tx, op: StepOp, tenant: str, row: StepRow | None) -> StepAnswer | None:
    """A memoized call (STEP, or a COMPENSATE of a cancelled run): its stored outcome, else a claim
    (a new try when an older activation's claim or a retryable failure is there)."""
    if row is None:
        made = await tx.workflow_step_insert(op.task_id, op.position, op.name, op.kind, "RUNNING", op.lease_epoch)
        return None if made is None else StepAnswer("RUN", attempt=1)
    other = _mismatch(op, row)
    if other is not None:
        return other
    if row.state == "COMPLETED" or (row.state == "FAILED" and row.fatal):
        return _done(row)
    if row.state == "RUNNING" and row.lease_epoch == op.lease_epoch:
        return StepAnswer("RUN", attempt=row.attempt)  # a resent begin
    attempt = await tx.workflow_step_reclaim(op.task_id, op.position, op.lease_epoch)
    if attempt is None:  # (the row is locked and the lease current: cannot happen)
        raise Contention(f"step {op.position} of run {op.task_id} could not be claimed")
    return StepAnswer("RUN", attempt=attempt)


async def _begin_version(tx: Tx, op: StepOp, tenant: str, row: StepRow | None) -> StepAnswer | None:
    """A branch marker: the branch logged here, else ABSENT when the log holds another step
    here (the run passed this point before the marker existed), else record op.version."""
    if row is None:
        made = await tx.workflow_step_insert(op.task_id, op.position, op.name, "VERSION", "COMPLETED",
                                             op.lease_epoch, str(op.version).encode())
        return None if made is None else _done(made)
    if row.kind == "VERSION" and row.name == op.name:
        return _done(row)
    return StepAnswer("ABSENT", attempt=row.attempt, logged_name=row.name, logged_kind=row.kind)


async def _begin_on_cancel(tx: Tx, op: StepOp, tenant: str, row: StepRow | None) -> StepAnswer | None:
    """A compensation registered (present or new, like a version marker): the ON_CANCEL row of
    that name, else record it (its args as the result, shown in the log only); another row
    here is a MISMATCH."""
    if row is None:
        made = await tx.workflow_step_insert(op.task_id, op.position, op.name, "ON_CANCEL", "COMPLETED",
                                             op.lease_epoch, op.result)
        return None if made is None else _done(made)
    other = _mismatch(op, row)
    return other if other is not None else _done(row)


async def _begin_sleep(tx: Tx, op: StepOp, tenant: str, row: StepRow | None) -> StepAnswer | None:
    """A durable timer: over (DONE) or not yet (SUSPEND with the time left)."""
    if row is None:
        over = op.duration_s is None or op.duration_s <= 0
        made = await tx.workflow_step_insert(op.task_id, op.position, op.name, "SLEEP",
                                             "COMPLETED" if over else "RUNNING", op.lease_epoch,
                                             wake_in_s=None if over else op.duration_s)
        if made is None:
            return None
        return _done(made) if over else StepAnswer("SUSPEND", attempt=1, wake_after_s=op.duration_s)
    other = _mismatch(op, row)
    if other is not None:
        return other
    if row.state != "RUNNING":
        return _done(row)
    if row.wake_in_s is None or row.wake_in_s <= 0:
        await tx.workflow_step_close(op.task_id, op.position, "COMPLETED")
        return StepAnswer("DONE", attempt=row.attempt)
    return StepAnswer("SUSPEND", attempt=row.attempt, wake_after_s=row.wake_in_s)


async def _begin_wait(tx: Tx, op: StepOp, tenant: str, row: StepRow | None) -> StepAnswer | None:
    """A wait for an event: the event (DONE with its data), the timeout (DONE with a fatal
    TimeoutError), an inbox event that matches (consumed now), else SUSPEND."""
    if row is None:
        made = await tx.workflow_step_insert(op.task_id, op.position, op.name, "WAIT", "RUNNING", op.lease_epoch,
                                             wake_in_s=op.duration_s)
        if made is None:
            return None
        return await _wait_on(tx, op, made, tenant, opened=False)
    other = _mismatch(op, row)
    if other is not None:
        return other
    if row.state != "RUNNING":
        return _done(row)
    return await _wait_on(tx, op, row, tenant, opened=True)


async def _wait_on(tx: Tx, op: StepOp, row: StepRow, tenant: str, *, opened: bool) -> StepAnswer:
    """A RUNNING wait: timed out, satisfied from the inbox, or (its wait opened) SUSPEND. A wait
    reached again after its timeout fails before it looks at the inbox (a timeout is final);
    a new one takes an event the inbox already holds, even with no time to wait."""
    timed_out = row.wake_in_s is not None and row.wake_in_s <= 0
    data = None if timed_out and opened else await tx.workflow_inbox_take(op.task_id, op.name, op.match_json,
                                                                         op.position)
    if data is not None:
        await tx.workflow_step_close(op.task_id, op.position, "COMPLETED", data)
        return StepAnswer("DONE", attempt=row.attempt, result=data)
    if timed_out:
        err = _timeout(op.name)
        await tx.workflow_step_close(op.task_id, op.position, "FAILED", error=err)
        return StepAnswer("DONE", attempt=row.attempt, error=err)
    if not opened:
        await tx.workflow_wait_insert(op.task_id, op.position, tenant, op.name, op.match_json)
    return StepAnswer("SUSPEND", attempt=row.attempt, wake_after_s=row.wake_in_s)


async def _begin_fanout(tx: Tx, op: StepOp, tenant: str, row: StepRow | None) -> StepAnswer | None:
    """BEGIN of PARALLEL/CHILD: a new fan-out (its step and barrier; RUN with the ids to start),
    the same one still open (RUN with the same ids: StartChildren is idempotent, and some may
    not exist yet), or its outcomes from the recorded ends (DONE). Another name, kind or
    child count at the position is a MISMATCH."""
    n = len(op.child_types)
    if row is None:
        if not await tx.workflow_fanout_insert(op.task_id, op.position, op.name, op.kind, op.lease_epoch, n,
                                               op.on_failure):
            return None  # a concurrent BEGIN inserted it first: read its row
        return StepAnswer("RUN", attempt=1, child_ids=tuple(fanout.child_ids(op.task_id, op.position, n)))
    f = await tx.workflow_fanout_lock(op.task_id, op.position)
    if f is None or f.name != op.name or f.kind != op.kind or f.child_count != n:
        return StepAnswer("MISMATCH", attempt=row.attempt, logged_name=row.name, logged_kind=row.kind)
    if f.state == "RUNNING":
        return StepAnswer("RUN", attempt=f.attempt, child_ids=tuple(fanout.child_ids(op.task_id, op.position, n)))
    outs = await fanout.outcomes(tx, op.task_id, op.position, n)
    return StepAnswer("DONE", attempt=f.attempt, children=tuple(outs))


async def _commit(tx: Tx, op: StepOp) -> StepAnswer:
    """Store a claimed step's outcome; a resent commit answers what the first stored."""
    state = "FAILED" if op.error is not None else "COMPLETED"
    attempt = await tx.workflow_step_commit(op.task_id, op.position, op.name, op.lease_epoch, state, op.result,
                                            op.error, op.fatal, op.kind)
    if attempt is not None:
        return StepAnswer("DONE", attempt=attempt, result=op.result, error=op.error)
    row = await tx.workflow_step_lock(op.task_id, op.position)
    if (row is not None and row.kind == op.kind and row.name == op.name and row.state != "RUNNING"
            and row.lease_epoch == op.lease_epoch):
        return _done(row)
    raise FailedPrecondition(f"step {op.position} ({op.name}) of run {op.task_id} is not claimed under lease "
                             f"{op.lease_epoch}: BEGIN it before its COMMIT")


_Begin = Callable[[Tx, StepOp, str, StepRow | None], Awaitable[StepAnswer | None]]
_BEGIN: dict[str, _Begin] = {"STEP": _begin_step, "VERSION": _begin_version, "SLEEP": _begin_sleep,
                             "WAIT": _begin_wait, "PARALLEL": _begin_fanout, "CHILD": _begin_fanout,
                             "ON_CANCEL": _begin_on_cancel, "COMPENSATE": _begin_step}
