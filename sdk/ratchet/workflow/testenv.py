"""WorkflowEnv: workflows run in-process on a fake clock against in-memory step logs.

ratchet.testing exports it (its docstring is the guide). Activations run through the
same runner and WorkflowContext as in the sandbox; only the channel differs: it
answers from a StepLog (memlog.py), which follows history's rules, and the run's
states follow history's decisions (a suspension adds an attempt, a failure retries
by the policy, a timer or an event wakes a WAITING run).

A fan-out's children are items of the same env: a @task child is a ChildTask whose
attempts run through execute() with its own policy, a @workflow child a WorkflowRun
like any other; each one's end reaches its parent's barrier (memlog's record_child),
which wakes the parent when it fires. Ready work sits in a FIFO queue, so a 1,000-way
fan-out costs 1,000 attempts, not 1,000 scans of every run.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
import random
import uuid
from collections.abc import Callable
from typing import Any

from ratchet.context import TaskContext, utc
from ratchet.libs.durations import parse_duration
from ratchet.retry import RetryPolicy
from ratchet.sandbox.execute import Outcome, execute
from ratchet.task import TaskSpec, spec_of
from ratchet.workflow.channel import ERROR, LOST, RUN, SUSPEND
from ratchet.workflow.context import WorkflowContext
from ratchet.workflow.memlog import InboxEvent, StepLog, StepRecord, reply
from ratchet.workflow.runner import Suspension, run_workflow

ENQUEUED, LEASED, WAITING = "ENQUEUED", "LEASED", "WAITING"
SUCCEEDED, FAILED, CANCELED = "SUCCEEDED", "FAILED", "CANCELED"
ENDED = frozenset({SUCCEEDED, FAILED, CANCELED})
FAN_OUTS = ("parallel", "child")
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class WorkflowRun:
    """One run in a WorkflowEnv. `state` is the platform's (ENQUEUED, WAITING, SUCCEEDED,
    FAILED, CANCELED); `result` the decoded return once SUCCEEDED; `error` ({error_class,
    message, stack}) and `exception` (the exception itself) once FAILED; `steps` the log
    (StepRecord: position, name, kind, status, attempt, result, error, fatal); `inbox`
    the events sent to it; `outcomes` every activation's Outcome; `attempt` the
    activations so far; `retry_delays_s` the backoffs the platform would have waited."""

    def __init__(self, workflow_id: str, spec: TaskSpec, input_json: str, parent: Parent | None = None):
        self.workflow_id = workflow_id
        self.parent = parent
        self.spec = spec
        self.input_json = input_json
        self.state = ENQUEUED
        self.attempt = 0
        self.max_attempts = spec.retry.max_attempts
        self.lease_epoch = 0
        self.log = StepLog(workflow_id)
        self.fan_outs: dict[int, list[Child]] = {}  # by position: the children it started, by index
        self.outcomes: list[Outcome] = []
        self.retry_delays_s: list[float] = []
        self.wake_at: float | None = None  # the wake timer, on the env's clock
        self.result: Any = None
        self.result_json: str | None = None
        self.error: dict | None = None
        self.exception: BaseException | None = None

    @property
    def id(self) -> str:
        """The run's id (its task id)."""
        return self.workflow_id

    def children(self, name: str) -> list[Child]:
        """The children fan-out `name` started, by index (a ChildTask for a @task, a
        WorkflowRun for a @workflow); KeyError if it started none."""
        row = self.step(name)
        if row.position not in self.fan_outs:
            raise KeyError(f"step {name!r} of run {self.workflow_id} started no children")
        return self.fan_outs[row.position]

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


@dataclasses.dataclass(frozen=True)
class Parent:
    """Where a child belongs: the run, the fan-out's position, the child's index there."""

    run: WorkflowRun
    position: int
    index: int


class ChildTask:
    """A @task child of a fan-out. `state` ENQUEUED, SUCCEEDED, FAILED or CANCELED;
    `attempt` the attempts so far (retried by its own policy); `result` (decoded),
    `error`, `exception`, `outcomes` (each attempt's Outcome), `retry_delays_s`."""

    def __init__(self, child_id: str, spec: TaskSpec, input_json: str, parent: Parent):
        self.id = child_id
        self.spec = spec
        self.input_json = input_json
        self.parent = parent
        self.state = ENQUEUED
        self.attempt = 0
        self.max_attempts = spec.retry.max_attempts
        self.outcomes: list[Outcome] = []
        self.retry_delays_s: list[float] = []
        self.result: Any = None
        self.result_json: str | None = None
        self.error: dict | None = None
        self.exception: BaseException | None = None

    @property
    def ended(self) -> bool:
        """Whether the child reached a terminal state."""
        return self.state in ENDED

    def __repr__(self) -> str:
        return f"ChildTask({self.id!r}, {self.spec.name!r}, state={self.state}, attempt={self.attempt})"


Child = ChildTask | WorkflowRun


class _EnvChannel:
    """Answers one activation's step requests from its run's in-memory log."""

    def __init__(self, env: WorkflowEnv, run: WorkflowRun, epoch: int):
        self._env, self._run, self._epoch = env, run, epoch

    def call(self, request: dict) -> dict:
        run = self._run
        if run.state != LEASED or run.lease_epoch != self._epoch:
            return reply(LOST, message=f"the run's lease {self._epoch} is not current")
        # Through JSON, as the frames carry it.
        request = json.loads(json.dumps(request))
        answer = run.log.answer(request, self._epoch, self._env.clock)
        if request.get("kind") in FAN_OUTS and answer["status"] == RUN:
            answer = self._start_children(request, answer)
        return json.loads(json.dumps(answer))

    def _start_children(self, request: dict, answer: dict) -> dict:
        """What the agent does with a fan-out's RUN: start the children (StartChildren, which
        refuses a handler the app does not have), then tell the stub to suspend."""
        refusal = self._env._start_children(self._run, request["position"], request["children"],
                                            answer["child_ids"])
        if refusal is not None:
            return reply(ERROR, fatal=True, message=refusal)
        return reply(SUSPEND, attempt=answer["attempt"], wake_after_s=None)


class _EnvContext(WorkflowContext):
    """A WorkflowContext whose step functions fail as the env's fail_step() asked."""

    def __init__(self, env: WorkflowEnv, **fields: Any):
        super().__init__(**fields)
        self._env = env

    def _resolve_handler(self, handler: Any) -> None:
        spec = spec_of(handler)
        if spec is not None:
            self._env._code.setdefault(spec.name, spec)

    def _call_step(self, name: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        injected = self._env._injected(name)
        if injected is not None:
            raise injected
        return super()._call_step(name, fn, args, kwargs)


class WorkflowEnv:
    """Workflows run in-process on a fake clock with in-memory step logs (see the module
    docstring). `clock` is the fake time in seconds since the env started, `now` the same
    as a UTC datetime (from 2026-01-01). `handlers` (or register()) are the app's other
    @task/@workflow functions, for fan-outs that name them by string. At most
    `max_activations` activations of one run happen per call that runs them, so a workflow
    that never blocks fails the test instead of hanging it."""

    def __init__(self, *, start: dt.datetime = EPOCH, max_activations: int = 1000,
                 handlers: tuple[Callable, ...] | list[Callable] = ()):
        self.clock = 0.0
        self._start = utc(start)
        self._max_activations = max_activations
        self.runs: list[WorkflowRun] = []
        self.tasks: list[ChildTask] = []
        self._code: dict[str, TaskSpec] = {}
        self._failures: dict[str, list] = {}
        self._task_failures: dict[str, list] = {}
        self._children: dict[str, Child] = {}
        self._ready: collections.deque[Child] = collections.deque()
        self.register(*handlers)

    @property
    def now(self) -> dt.datetime:
        """The fake clock as a UTC datetime."""
        return self._start + dt.timedelta(seconds=self.clock)

    def register(self, *handlers: Callable) -> None:
        """Make @task/@workflow functions known by name, as the app's deployment declares
        them (a fan-out naming a handler by string finds it here; a function passed to a
        fan-out is learnt when it is)."""
        for handler in handlers:
            spec = spec_of(handler)
            if spec is None:
                raise TypeError(f"{handler!r} is neither a @task nor a @workflow")
            self._code[spec.name] = spec

    def start(self, workflow: Callable, input: Any = None, *, workflow_id: str | None = None) -> WorkflowRun:
        """Start a run of workflow (a @workflow function) on input; it runs on the next
        run_until_blocked() or advance()."""
        spec = spec_of(workflow)
        if spec is None or spec.kind != "workflow":
            raise TypeError(f"{workflow!r} is not a workflow; decorate it with @workflow")
        self._code.setdefault(spec.name, spec)
        run = WorkflowRun(workflow_id or str(uuid.uuid4()), spec, json.dumps(input))
        self.runs.append(run)
        self._ready.append(run)
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

    def fail_task(self, task_type: str, error: BaseException, times: int = 1) -> None:
        """Make the next `times` attempts of child tasks of task_type raise error instead of
        running (retried by the task's policy, or final when fatal, as a real failure)."""
        if not isinstance(error, BaseException):
            raise TypeError(f"fail_task() needs an exception instance, got {error!r}")
        self._task_failures.setdefault(task_type, []).extend([error] * times)

    def _injected(self, name: str) -> BaseException | None:
        queue = self._failures.get(name)
        return queue.pop(0) if queue else None

    def run_until_blocked(self) -> None:
        """Run activations and child attempts until nothing is ready: each run has ended or
        waits (a sleep, an event, its children). A failed attempt's retry runs at once (the
        clock does not move)."""
        activations: collections.Counter[str] = collections.Counter()
        while self._ready:
            item = self._ready.popleft()
            if item.state != ENQUEUED:
                continue  # cancelled while it waited in the queue
            if isinstance(item, ChildTask):
                self._attempt(item)
                continue
            activations[item.workflow_id] += 1
            if activations[item.workflow_id] > self._max_activations:
                self._ready.appendleft(item)
                raise RuntimeError(f"run {item.workflow_id} took more than {self._max_activations} activations "
                                   f"without blocking; a workflow that never sleeps, waits or ends?")
            self._activate(item)

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
        """Cancel a run that has not ended: its waits and timer deleted, the children of its
        open fan-outs cancelled (a child workflow's own children too), and CANCELED. A run that
        registered compensations (ctx.on_cancel) runs them first, here and now: its next
        activation replays to where it was and runs them last first (a retryable failure
        retries the activation by its policy, at once), then it ends CANCELED."""
        if self._request_cancel(self._run(run)):
            self.run_until_blocked()

    def _request_cancel(self, target: WorkflowRun) -> bool:
        """History's CancelTask: True when the run has compensations to run (it is queued)."""
        if target.ended or target.log.cancelled:
            return False  # (a second cancel changes nothing)
        target.wake_at = None
        target.log.close_waits()
        for row in target.steps:
            if row.kind in FAN_OUTS and row.status == "RUNNING":
                self._cancel_children(target, row.position)
        if not any(row.kind == "on_cancel" for row in target.steps):
            target.state = CANCELED
            self._ended(target)
            return False
        target.log.cancelled = True
        if target.state == WAITING:
            self._requeue(target)
        return True

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
            self._ready.append(run)

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
                self._requeue(run)
                return
            run.state = WAITING
            run.wake_at = None if outcome.wake_after_s is None else self.clock + outcome.wake_after_s
        else:
            self._finish(run, outcome)

    def _finish(self, item: Child, outcome: Outcome) -> None:
        """A run's or a child task's state after an attempt that did not suspend."""
        if outcome.outcome == "succeeded":
            item.state, item.result_json = SUCCEEDED, outcome.result or "null"
            item.result = json.loads(item.result_json)
        elif outcome.outcome == "canceled":
            item.state, item.error = CANCELED, outcome.error
        else:
            self._failed(item, outcome)
        if item.ended:
            self._ended(item)

    def _failed(self, item: Child, outcome: Outcome) -> None:
        error = outcome.error or {}
        policy = item.spec.retry
        rule = policy.rules.get(str(error.get("error_class")))
        limit = rule.max_attempts if isinstance(rule, RetryPolicy) and "max_attempts" in rule.explicit \
            else item.max_attempts
        if outcome.fatal or item.attempt >= limit:
            item.state, item.error, item.exception = FAILED, outcome.error, outcome.exception
            return
        delay = outcome.retry_after_s
        if delay is None:
            retry = policy.for_error(str(error.get("error_class")))
            delay = retry.delay_s(item.attempt, _Ceiling())
        item.retry_delays_s.append(delay)
        self._requeue(item)

    def _requeue(self, item: Child) -> None:
        item.state = ENQUEUED
        self._ready.append(item)

    # ---- fan-outs ---------------------------------------------------------------------------

    def _start_children(self, run: WorkflowRun, position: int, specs: list[dict], ids: list[str]) -> str | None:
        """StartChildren: every child of the fan-out at position exists once (a repeated call
        starts none twice); the refusal's message when one names a handler the app lacks."""
        unknown = sorted({s["task_type"] for s in specs} - set(self._code))
        if unknown:
            return (f"the app has no handler {', '.join(map(repr, unknown))} (it has {sorted(self._code)}); "
                    f"pass the @task/@workflow function, or register it: WorkflowEnv(handlers=[...])")
        children = run.fan_outs.setdefault(position, [])
        for index, (spec_frame, child_id) in enumerate(zip(specs, ids, strict=True)):
            if child_id in self._children:
                continue
            child = self._new_child(child_id, spec_frame, Parent(run, position, index))
            self._children[child_id] = child
            children.append(child)
            self._ready.append(child)
        return None

    def _new_child(self, child_id: str, spec_frame: dict, parent: Parent) -> Child:
        spec = self._code[spec_frame["task_type"]]
        if spec.kind == "workflow":
            run = WorkflowRun(child_id, spec, spec_frame["payload"], parent)
            self.runs.append(run)
            return run
        task = ChildTask(child_id, spec, spec_frame["payload"], parent)
        self.tasks.append(task)
        return task

    def _attempt(self, task: ChildTask) -> None:
        """One attempt of a child task, through execute() as in the sandbox."""
        task.attempt += 1
        spec = task.spec
        injected = self._task_failures.get(spec.name)
        if injected:
            spec = dataclasses.replace(spec, fn=_raiser(injected.pop(0)))
        ctx = TaskContext(task_id=task.id, attempt=task.attempt, max_attempts=task.max_attempts,
                          lease_epoch=task.attempt, task_type=spec.name, on_heartbeat=_nothing)
        outcome = execute(spec, ctx, task.input_json)
        ctx._end()
        task.outcomes.append(outcome)
        self._finish(task, outcome)

    def _ended(self, item: Child) -> None:
        """A run or child task reached a terminal state: its waits go, and a child's end
        reaches its parent's barrier (the child-end outbox, delivered at once here)."""
        if isinstance(item, WorkflowRun):
            item.log.close_waits()
        parent = item.parent
        if parent is None:
            return
        row = parent.run.steps[parent.position]
        child_id = item.id
        done = {"index": parent.index, "child_id": child_id, "state": item.state,
                "result": item.result_json if item.state == SUCCEEDED else None,
                "error": item.error if item.state != SUCCEEDED else None}
        if parent.run.log.cancelled:
            # A cancelled run's barrier does not fire: the cascade's ends must not move the run
            # past the point it was cancelled at (its replay stops at the fan-out, compensates).
            row.children_done.setdefault(parent.index, done)
            return
        if row.record_child(done):
            self._wake(parent.run)
            if row.on_failure == "fail_fast":
                self._cancel_children(parent.run, parent.position)

    def _cancel_children(self, run: WorkflowRun, position: int) -> None:
        for child in list(run.fan_outs.get(position, ())):
            if isinstance(child, WorkflowRun):
                self._request_cancel(child)  # (its compensations run from the loop running now)
            elif not child.ended:
                child.state = CANCELED
                self._ended(child)


def _raiser(error: BaseException) -> Callable[[Any, Any], Any]:
    def injected(ctx: Any, payload: Any) -> Any:
        raise error
    return injected


def _nothing() -> None:
    """A heartbeat goes nowhere in the env."""


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
