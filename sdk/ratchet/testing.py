"""Run handlers locally, as the platform would, to unit-test them.

    from ratchet import testing

    def test_resize():
        assert testing.run(resize_image, {"url": "..."}) == {"ok": True}

    def test_gives_up_on_bad_input():
        with pytest.raises(FatalError):
            testing.run(resize_image, {})

    def test_resumes_from_its_cursor():
        outcome = testing.run_attempt(backfill, {"day": "2026-01-01"}, last_checkpoint={"offset": 500})
        assert outcome.checkpoints[-1] == {"offset": 1000}

The payload, the result and checkpoints go through JSON exactly as on the
platform (with the same size limits), and the handler runs with the policy
its @task declared.

Workflows run in a WorkflowEnv: in-process, on a fake clock, against an
in-memory step log that answers by the platform's rules (memoized steps, step
attempts, version markers, sleeps and waits that suspend the run, the inbox,
broadcasts, timeouts, versioning errors), so a day's sleep takes milliseconds:

    def test_onboarding():
        env = testing.WorkflowEnv()
        run = env.start(onboard, {"email": "a@example.com"})
        env.run_until_blocked()                    # runs until it sleeps or waits
        assert run.state == "WAITING" and run.step("create_account").status == "COMPLETED"
        env.advance("1d")                          # the fake clock; fires the sleep's timer
        assert env.send_event(run, "approved", {"account": 7, "ok": True})  # into the wait
        env.run_until_blocked()
        assert run.state == "SUCCEEDED" and run.result == {"account": 7, "approved": True}

    def test_a_flaky_step_is_retried():
        env = testing.WorkflowEnv()
        env.fail_step("create_account", ConnectionError("down"), times=1)
        run = env.start(onboard, {...}); env.run_until_blocked()
        assert run.step("create_account").attempt == 2     # ctx.step_attempt was 2

    def test_new_code_that_drops_a_step_fails_live_runs():
        env = testing.WorkflowEnv(); run = env.start(onboard_v1, {...}); env.run_until_blocked()
        env.deploy(onboard_v2)                     # same workflow name, new code
        env.advance("1d")
        assert run.state == "FAILED" and run.error["error_class"] == "WorkflowVersionError"

`env.start(wf, input)` makes a run (ENQUEUED; nothing runs yet). `run_until_blocked()`
runs activations until every run has ended or waits; a failed activation is retried at
once by its policy (run.retry_delays_s lists the backoffs the platform would have
waited) until its attempts are spent. `advance(duration)` moves the clock, firing each
sleep's and each wait timeout's timer in order and running what it wakes.
`send_event(run, name, data)` puts an event in the run's inbox (True if it completed
the wait the run is in); `broadcast(name, data)` completes every open matching wait
(returns how many) and keeps nothing. `fail_step(name, exc, times=1)` makes the next
executions of a step raise exc. `deploy(wf)` swaps the code runs resume on ("pinned"
runs keep theirs); `cancel(run)`. A WorkflowRun has `state`, `result`, `error`,
`exception`, `attempt`, `steps` (StepRecord: position, name, kind, status, attempt,
result, error, fatal), `step(name)`, `inbox` and `outcomes`.

Fan-outs run in the same env: each child of `ctx.parallel` / `ctx.child` is a ChildTask
(a @task: its attempts run at once, retried by its own policy) or a WorkflowRun (a
@workflow: with its own sleeps and waits on the same clock), and the parent wakes when
the barrier fires (every child ended, or with fail_fast the first failure, which
cancels the siblings not yet ended):

    def test_fan_out():
        env = testing.WorkflowEnv(handlers=[resize])   # handlers named by string
        env.fail_task("resize", ConnectionError("down"), times=1)  # retried by resize's policy
        run = env.start(gallery, {"images": [...]}); env.run_until_blocked()
        assert run.state == "SUCCEEDED"
        assert [c.state for c in run.children("resize_all")] == ["SUCCEEDED", ...]

`run.children(name)` lists a fan-out's children by index (ChildTask: id, state, attempt,
result, error, outcomes, retry_delays_s, parent); `env.tasks` holds every child task.
`env.cancel(run)` cancels its open fan-outs' children too, down the tree. A handler the
env does not know fails the run at once (StepRefused), as the platform refuses it.

Compensations (`ctx.on_cancel`) run when a run that registered any is cancelled:
`env.cancel(run)` runs its next activation at once, which replays to where the run was
(the checkpoint it stopped at answers "cancelled", as the platform's does) and runs the
compensations last first, each a step named "compensate:<name>" in the log; then the
run is CANCELED. `fail_step("compensate:<name>", exc)` makes one fail: retryable, the
activation is retried by the run's policy (at once; the backoff is in retry_delays_s)
and only the unfinished ones run again, out of attempts the run FAILS; fatal, it is
logged FAILED and the others run. A run without compensations is CANCELED at once:

    def test_cancel_refunds():
        env = testing.WorkflowEnv()
        run = env.start(book_trip, {...}); env.run_until_blocked()   # sleeping till departure
        env.cancel(run)
        assert run.state == "CANCELED"
        assert run.step("compensate:refund").status == "COMPLETED"
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

from ratchet.context import TaskContext, utc
from ratchet.libs.durations import parse_duration
from ratchet.retry import RetryPolicy
from ratchet.sandbox.execute import Outcome, execute
from ratchet.task import DEFAULT_TIMEOUT, TaskSpec, spec_of
from ratchet.workflow.memlog import InboxEvent, StepRecord
from ratchet.workflow.testenv import ChildTask, WorkflowEnv, WorkflowRun

__all__ = ["ChildTask", "FakeContext", "InboxEvent", "StepRecord", "WorkflowEnv", "WorkflowRun", "run",
           "run_attempt"]


class FakeContext(TaskContext):
    """A TaskContext for tests: counts heartbeats, keeps every checkpoint taken
    (`checkpoints`, decoded, oldest first); `cancel()` flips cancelled().

    `last_checkpoint` is what an earlier attempt stored; `scheduled_time` (a
    datetime, naive meaning UTC, or ISO 8601 text) and `schedule_id` make the
    task look fired by a schedule.
    """

    def __init__(self, *, task_id: str | None = None, attempt: int = 1, max_attempts: int = 5,
                 lease_epoch: int | None = None, task_type: str = "test", cancelled: bool = False,
                 last_checkpoint: Any = None, schedule_id: str | None = None,
                 scheduled_time: dt.datetime | str | None = None):
        event = threading.Event()
        if cancelled:
            event.set()
        self.heartbeats = 0
        self.checkpoints: list[Any] = []
        if isinstance(scheduled_time, str):
            scheduled_time = dt.datetime.fromisoformat(scheduled_time)
        if scheduled_time is not None and schedule_id is None:
            schedule_id = "test-schedule"
        # Through JSON, as the platform stores it.
        last_checkpoint = None if last_checkpoint is None else json.loads(json.dumps(last_checkpoint))
        super().__init__(task_id=task_id or str(uuid.uuid4()), attempt=attempt, max_attempts=max_attempts,
                         lease_epoch=attempt if lease_epoch is None else lease_epoch, task_type=task_type,
                         on_heartbeat=self._count, cancel_event=event, last_checkpoint=last_checkpoint,
                         schedule_id=schedule_id, scheduled_time=utc(scheduled_time) if scheduled_time else None,
                         on_checkpoint=self._keep)

    def _count(self) -> None:
        self.heartbeats += 1

    def _keep(self, text: str) -> None:
        self.checkpoints.append(json.loads(text))

    def heartbeat(self) -> None:
        """Counted on every call (no coalescing under test)."""
        self._count()

    def cancel(self) -> None:
        """Request cancellation, as the platform does on cancel or timeout."""
        self._request_cancel()


def _spec(handler: Callable) -> TaskSpec:
    spec = spec_of(handler)
    if spec is None:  # a plain function: run it with the platform defaults, leaving it undecorated
        spec = TaskSpec(getattr(handler, "__name__", "handler"), handler, RetryPolicy(),
                        parse_duration(DEFAULT_TIMEOUT), None, None)
    elif spec.kind == "workflow":
        raise TypeError(f"{spec.name!r} is a workflow: run it with testing.WorkflowEnv().start({spec.name}, input) "
                        f"and env.run_until_blocked()")
    return spec


def run_attempt(handler: Callable, payload: Any = None, *, ctx: TaskContext | None = None, attempt: int = 1,
                cancelled: bool = False, last_checkpoint: Any = None, scheduled_time: dt.datetime | str | None = None,
                schedule_id: str | None = None) -> Outcome:
    """Run one attempt and return its Outcome (succeeded / failed / canceled,
    with result JSON, error class, message, stack, fatal and retry_after_s,
    and `checkpoints`: the values the handler passed to ctx.checkpoint())."""
    spec = _spec(handler)
    if ctx is None:
        ctx = FakeContext(attempt=attempt, max_attempts=spec.retry.max_attempts, task_type=spec.name,
                          cancelled=cancelled, last_checkpoint=last_checkpoint, scheduled_time=scheduled_time,
                          schedule_id=schedule_id)
    outcome = execute(spec, ctx, json.dumps(payload))
    outcome.checkpoints = list(getattr(ctx, "checkpoints", []))
    return outcome


def run(handler: Callable, payload: Any = None, attempt: int = 1, cancelled: bool = False, *,
        ctx: TaskContext | None = None, last_checkpoint: Any = None, scheduled_time: dt.datetime | str | None = None,
        schedule_id: str | None = None) -> Any:
    """Run handler(ctx, payload) once and return its result as the platform
    stores it (after a JSON round trip), or raise what the handler raised.

    A result that is not JSON or is over 256 KiB raises ResultNotSerializable
    or ResultTooLarge, as it would fail the task on the platform. To see the
    checkpoints taken, pass `ctx=FakeContext(...)` and read `ctx.checkpoints`,
    or use run_attempt.
    """
    outcome = run_attempt(handler, payload, ctx=ctx, attempt=attempt, cancelled=cancelled,
                          last_checkpoint=last_checkpoint, scheduled_time=scheduled_time, schedule_id=schedule_id)
    if outcome.exception is not None:
        raise outcome.exception
    if outcome.outcome == "failed":  # a failure the stub decided, e.g. an unparsable payload
        error = outcome.error or {}
        raise RuntimeError(f"{error.get('error_class')}: {error.get('message')}")
    return json.loads(outcome.result) if outcome.result is not None else None
