"""WorkflowEnv: workflows run in-process on a fake clock against in-memory step logs.

ratchet.testing exports it (its docstring is the guide). Activations run through the
same runner and WorkflowContext as in the sandbox; only the channel differs: it
answers from a StepLog (memlog.py), which follows history's rules, and the run's
states follow history's decisions (a suspension adds an attempt, a failure retries
by the policy, a timer or an event wakes a WAITING run).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from collections.abc import Callable
from typing import Any

from ratchet.context import utc
from ratchet.libs.durations import parse_duration
from ratchet.retry import RetryPolicy
from ratchet.sandbox.execute import Outcome
from ratchet.task import TaskSpec, spec_of
from ratchet.workflow.channel import LOST
from ratchet.workflow.context import WorkflowContext
from ratchet.workflow.memlog import InboxEvent, StepLog, StepRecord, reply
from ratchet.workflow.runner import Suspension, run_workflow

ENQUEUED, LEASED, WAITING = "ENQUEUED", "LEASED", "WAITING"
SUCCEEDED, FAILED, CANCELED = "SUCCEEDED", "FAILED", "CANCELED"
ENDED = frozenset({SUCCEEDED, FAILED, CANCELED})
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class WorkflowRun:
    """One run in a WorkflowEnv. `state` is the platform's (ENQUEUED, WAITING, SUCCEEDED,
    FAILED, CANCELED); `result` the decoded return once SUCCEEDED; `error` ({error_class,
    message, stack}) and `exception` (the exception itself) once FAILED; `steps` the log
    (StepRecord: position, name, kind, status, attempt, result, error, fatal); `inbox`
    the events sent to it; `outcomes` every activation's Outcome; `attempt` the
    activations so far; `retry_delays_s` the backoffs the platform would have waited."""

    def __init__(self, workflow_id: str, spec: TaskSpec, input_json: str):
        self.workflow_id = workflow_id
        self.spec = spec
        self.input_json = input_json
        self.state = ENQUEUED
        self.attempt = 0
        self.max_attempts = spec.retry.max_attempts
        self.lease_epoch = 0
        self.log = StepLog()
        self.outcomes: list[Outcome] = []
        self.retry_delays_s: list[float] = []
        self.wake_at: float | None = None  # the wake timer, on the env's clock
        self.result: Any = None
        self.error: dict | None = None
        self.exception: BaseException | None = None

    @property
    def steps(self) -> list[StepRecord]:
        """The step log, by position."""
        return self.log.steps

    @property
    def inbox(self) -> list[InboxEvent]:
        """The events sent to this run, oldest first (consumed_by: the wait that took one)."""
        return self.log.inbox

    @property
    def ended(self) -> bool:
        """Whether the run reached a terminal state."""
        return self.state in ENDED

    def step(self, name: str) -> StepRecord:
        """The log entry called name (the first, if several); KeyError if none."""
        for row in self.log.steps:
            if row.name == name:
                return row
        raise KeyError(f"run {self.workflow_id} has no step {name!r}; it logged {[r.name for r in self.log.steps]}")

    def __repr__(self) -> str:
        return f"WorkflowRun({self.workflow_id!r}, {self.spec.name!r}, state={self.state}, steps={len(self.steps)})"


class _EnvChannel:
    """Answers one activation's step requests from its run's in-memory log."""

    def __init__(self, env: WorkflowEnv, run: WorkflowRun, epoch: int):
        self._env, self._run, self._epoch = env, run, epoch

    def call(self, request: dict) -> dict:
        run = self._run
        if run.state != LEASED or run.lease_epoch != self._epoch:
            return reply(LOST, message=f"the run's lease {self._epoch} is not current")
        # Through JSON, as the frames carry it.
        return json.loads(json.dumps(run.log.answer(json.loads(json.dumps(request)), self._epoch, self._env.clock)))


class _EnvContext(WorkflowContext):
    """A WorkflowContext whose step functions fail as the env's fail_step() asked."""

    def __init__(self, env: WorkflowEnv, **fields: Any):
        super().__init__(**fields)
        self._env = env

    def _call_step(self, name: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        injected = self._env._injected(name)
        if injected is not None:
            raise injected
        return super()._call_step(name, fn, args, kwargs)


class WorkflowEnv:
    """Workflows run in-process on a fake clock with in-memory step logs (see the module
    docstring). `clock` is the fake time in seconds since the env started, `now` the same
    as a UTC datetime (from 2026-01-01). At most `max_activations` activations run per
    call that runs them, so a workflow that never blocks fails the test instead of
    hanging it."""

    def __init__(self, *, start: dt.datetime = EPOCH, max_activations: int = 1000):
        self.clock = 0.0
        self._start = utc(start)
        self._max_activations = max_activations
        self.runs: list[WorkflowRun] = []
        self._code: dict[str, TaskSpec] = {}
        self._failures: dict[str, list] = {}

    @property
    def now(self) -> dt.datetime:
        """The fake clock as a UTC datetime."""
        return self._start + dt.timedelta(seconds=self.clock)

    def start(self, workflow: Callable, input: Any = None, *, workflow_id: str | None = None) -> WorkflowRun:
        """Start a run of workflow (a @workflow function) on input; it runs on the next
        run_until_blocked() or advance()."""
        spec = spec_of(workflow)
        if spec is None or spec.kind != "workflow":
            raise TypeError(f"{workflow!r} is not a workflow; decorate it with @workflow")
        self._code.setdefault(spec.name, spec)
        run = WorkflowRun(workflow_id or str(uuid.uuid4()), spec, json.dumps(input))
        self.runs.append(run)
        return run

    def deploy(self, workflow: Callable) -> None:
        """New code for a workflow name: runs that resume "latest" execute it from their next
        activation (their logs are checked against it); "pinned" runs keep their code."""
        spec = spec_of(workflow)
        if spec is None or spec.kind != "workflow":
            raise TypeError(f"{workflow!r} is not a workflow; decorate it with @workflow")
        self._code[spec.name] = spec
        for run in self.runs:
            if run.spec.name == spec.name and run.spec.resume != "pinned":
                run.spec = spec

    def fail_step(self, name: str, error: BaseException, times: int = 1) -> None:
        """Make the next `times` executions of step `name` raise error instead of calling its
        function (the error is logged and retried, or final, as a real one would be)."""
        if not isinstance(error, BaseException):
            raise TypeError(f"fail_step() needs an exception instance, got {error!r}")
        self._failures.setdefault(name, []).extend([error] * times)

    def _injected(self, name: str) -> BaseException | None:
        queue = self._failures.get(name)
        return queue.pop(0) if queue else None

    def run_until_blocked(self) -> None:
        """Run activations until no run is ready: each has ended or waits (a sleep, an
        event). A failed activation's retry runs at once (the clock does not move)."""
        for _ in range(self._max_activations):
            ready = next((r for r in self.runs if r.state == ENQUEUED), None)
            if ready is None:
                return
            self._activate(ready)
        raise RuntimeError(f"more than {self._max_activations} activations without every run blocking; "
                           f"a workflow that never sleeps, waits or ends?")

    def advance(self, duration: str | int | float) -> None:
        """Move the clock forward by duration ("1d", or seconds), firing each timer (a sleep's
        end, a wait's timeout) when its time comes and running what it wakes."""
        target = self.clock + parse_duration(duration)
        self.run_until_blocked()
        while True:
            due = [r for r in self.runs if r.state == WAITING and r.wake_at is not None and r.wake_at <= target]
            if not due:
                break
            first = min(r.wake_at for r in due if r.wake_at is not None)
            self.clock = max(self.clock, first)
            for run in due:
                if run.wake_at is not None and run.wake_at <= self.clock:
                    self._wake(run)
            self.run_until_blocked()
        self.clock = target

    def send_event(self, run: WorkflowRun | str, name: str, data: dict | None = None) -> bool:
        """Send an event to one run (its inbox): True when it completed the wait the run is in,
        False when it stays in the inbox for a later wait. Call run_until_blocked() to run what
        it woke. A run that has ended refuses it (RuntimeError), as the platform does."""
        target = self._run(run)
        if target.ended:
            raise RuntimeError(f"run {target.workflow_id} has ended ({target.state}); events go to live runs")
        delivered = target.log.deliver(name, _event_json(data), self.clock)
        if delivered:
            self._wake(target)
        return delivered

    def broadcast(self, name: str, data: dict | None = None) -> int:
        """Send an event to every run waiting for it now (match contained, timeout not passed);
        returns how many it woke. It is not kept for runs that wait later."""
        text = _event_json(data)
        woken = 0
        for run in sorted(self.runs, key=lambda r: r.workflow_id):
            if not run.ended and run.log.offer(name, text, self.clock):
                self._wake(run)
                woken += 1
        return woken

    def cancel(self, run: WorkflowRun | str) -> None:
        """Cancel a run that has not ended: CANCELED, its waits and timer deleted."""
        target = self._run(run)
        if not target.ended:
            target.state, target.wake_at = CANCELED, None
            target.log.close_waits()

    def _run(self, run: WorkflowRun | str) -> WorkflowRun:
        if isinstance(run, WorkflowRun):
            return run
        for r in self.runs:
            if r.workflow_id == run:
                return r
        raise KeyError(f"no run {run!r} in this env")

    def _wake(self, run: WorkflowRun) -> None:
        if run.state == WAITING:
            run.state, run.wake_at = ENQUEUED, None

    def _activate(self, run: WorkflowRun) -> None:
        run.attempt += 1
        run.lease_epoch += 1
        run.state = LEASED
        spec = run.spec
        ctx = _EnvContext(self, channel=_EnvChannel(self, run, run.lease_epoch), policy=spec.retry,
                          task_id=run.workflow_id, attempt=run.attempt, max_attempts=run.max_attempts,
                          lease_epoch=run.lease_epoch, task_type=spec.name)
        outcome = run_workflow(spec, ctx, run.input_json)
        run.outcomes.append(outcome)
        self._settle(run, outcome)

    def _settle(self, run: WorkflowRun, outcome: Outcome) -> None:
        """The run's next state after an activation, as history decides it."""
        if isinstance(outcome, Suspension):
            run.max_attempts += 1  # a suspension does not use up an attempt
            step = run.steps[outcome.suspend_position] if outcome.suspend_position < len(run.steps) else None
            if step is None or step.status != "RUNNING":  # completed between its begin and the suspension
                run.state = ENQUEUED
                return
            run.state = WAITING
            run.wake_at = None if outcome.wake_after_s is None else self.clock + outcome.wake_after_s
        elif outcome.outcome == "succeeded":
            run.state, run.result = SUCCEEDED, json.loads(outcome.result or "null")
        elif outcome.outcome == "canceled":
            run.state = CANCELED
        else:
            self._failed(run, outcome)
        if run.ended:
            run.log.close_waits()

    def _failed(self, run: WorkflowRun, outcome: Outcome) -> None:
        error = outcome.error or {}
        policy = run.spec.retry
        rule = policy.rules.get(str(error.get("error_class")))
        limit = rule.max_attempts if isinstance(rule, RetryPolicy) and "max_attempts" in rule.explicit \
            else run.max_attempts
        if outcome.fatal or run.attempt >= limit:
            run.state, run.error, run.exception = FAILED, outcome.error, outcome.exception
            return
        delay = outcome.retry_after_s
        if delay is None:
            retry = policy.for_error(str(error.get("error_class")))
            delay = retry.delay_s(run.attempt, _Ceiling())
        run.retry_delays_s.append(delay)
        run.state = ENQUEUED


class _Ceiling(random.Random):
    """Draws the top of the jitter range: the recorded backoff is the longest the platform waits."""

    def uniform(self, a: float, b: float) -> float:
        return b


def _event_json(data: Any) -> str:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"an event's data must be a dict (a JSON object), got {type(data).__name__}")
    return json.dumps(data)
