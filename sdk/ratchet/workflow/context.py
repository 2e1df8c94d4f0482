"""`ctx` of a workflow: a TaskContext plus the calls that checkpoint into the run's log.

Every checkpoint call (`step`, `version`, `sleep`, `wait_for_event`, `parallel`,
`child`, `on_cancel`) takes the
next position of the log (0-based, in the order the code makes them; a version
marker answered ABSENT takes none), so a resumed run re-executes its function
from the top and each call meets its own earlier outcome: a finished step
answers from the log instead of running again. The code must therefore make
the same calls in the same order on every activation; when it changes under a
live run, the first call that meets another entry raises WorkflowVersionError.

Compensations: `on_cancel` registers a function (logged, not run). When the run
has been cancelled the platform answers "cancelled" at the first checkpoint the
run had not passed; the code unwinds there (WorkflowCancelled) and the runner
calls `_compensate()`, which runs the registered functions last first, each a
memoized "compensate" step at the positions from the CANCELLED answer's compensate_from on.

Reading ahead: a DONE reply may carry "ahead", the completed entries the log holds
right after that position. The context keeps them and answers its next begins from
them, without a round trip, exactly as the platform would (a completed entry never
changes, so what it answers is what history would answer, cancelled run or not): same
name and kind is DONE with the logged value; another name or kind is the MISMATCH
history would give (for a version marker: ABSENT, the entry stays for the next call).
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import math
import re
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, NoReturn

from ratchet.context import TaskContext
from ratchet.errors import (
    ChildError,
    ChildFailed,
    FatalError,
    LeaseLost,
    ResultNotSerializable,
    ResultTooLarge,
    StepFailed,
    StepRefused,
    StepUnavailable,
    WorkflowCancelled,
    WorkflowSuspended,
    WorkflowVersionError,
)
from ratchet.libs.durations import parse_duration
from ratchet.retry import RetryPolicy
from ratchet.task import NAME_PATTERN
from ratchet.workflow import channel as ch

# What the customer wrote, for messages: the log's kinds are the calls' short names.
_CALL = {"step": "ctx.step", "version": "ctx.version", "sleep": "ctx.sleep", "wait": "ctx.wait_for_event",
         "parallel": "ctx.parallel", "child": "ctx.child", "on_cancel": "ctx.on_cancel",
         "compensate": "ctx.on_cancel"}
_UNITS = (("seconds", 1.0), ("minutes", 60.0), ("hours", 3600.0), ("days", 86400.0))
# The longest duration the platform stores (protobuf's Duration: 10,000 years).
MAX_DURATION_S = 315_576_000_000.0
# A compensation's arguments are logged for people to read; larger ones are logged as null.
MAX_LOGGED_ARGS_BYTES = 64 * 1024
# The kinds read ahead (StepResponse.ahead) and the calls answered from such an entry: a
# compensation always asks (it runs only while cancelled, at positions past the replay).
_AHEAD_KINDS = frozenset({"step", "version", "sleep", "wait", "on_cancel"})
_ANSWERED_AHEAD = _AHEAD_KINDS | {"parallel", "child"}
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_.:-]")
MAX_NAME_CHARS = 200


def check_name(kind: str, name: Any) -> str:
    """name, if the platform accepts it as a step (or event) name; a clear ValueError if not."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"{_CALL.get(kind, kind)}() name must be 1..200 characters of [A-Za-z0-9_.:-], "
                         f"got {name!r}")
    return name


def compensation_name(fn: Any) -> str:
    """The name an on_cancel without name= logs: fn's __name__ with every character the
    platform refuses made "_", cut to 200 ("<lambda>" is "_lambda_")."""
    raw = getattr(fn, "__name__", None) or type(fn).__name__
    return _NOT_IN_NAMES.sub("_", str(raw))[:MAX_NAME_CHARS] or "compensation"


def compensate_name(name: str) -> str:
    """The step name a compensation runs under: "compensate:" + its on_cancel's name, cut to
    the platform's 200 characters (the position, not the name, tells two apart)."""
    return f"compensate:{name}"[:MAX_NAME_CHARS]


def logged_args(args: tuple, kwargs: dict) -> str | None:
    """A compensation's arguments as JSON text for the log ({"args", "kwargs"}), or None when
    they are not JSON or too large: they are shown, never read back (the code passes them
    again on every replay)."""
    try:
        text = json.dumps({"args": list(args), "kwargs": kwargs}, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except (TypeError, ValueError):
        return None
    return text if len(text.encode("utf-8")) <= MAX_LOGGED_ARGS_BYTES else None


def sleep_seconds(duration: Any, units: dict[str, Any]) -> float:
    """How long ctx.sleep() was asked to sleep: `duration` ("1d", seconds, or a timedelta)
    or the sum of the keyword units, never both; ValueError naming what to write otherwise.
    A computed duration of 0 or less is a sleep that is over at once (0.0), not an error:
    `ctx.sleep("until", seconds=deadline - now)` must work when the deadline has passed."""
    given = {k: v for k, v in units.items() if v is not None}
    if duration is not None and given:
        raise ValueError("ctx.sleep() takes a duration or seconds=/minutes=/hours=/days=, not both")
    if duration is not None:
        return checked_duration("ctx.sleep()", _duration_s(duration))
    if not given:
        raise ValueError("ctx.sleep(name) needs how long: a duration such as '1d' or '90s', "
                         "or seconds=, minutes=, hours=, days=")
    total = 0.0
    for unit, scale in _UNITS:
        value = given.get(unit, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"ctx.sleep() {unit}= must be a finite number, got {value!r}")
        total += value * scale
    return checked_duration("ctx.sleep()", max(0.0, total))


def _duration_s(duration: Any) -> float:
    """A sleep's duration in seconds, at least 0: a negative number or timedelta (computed,
    and already past) sleeps 0; text goes through parse_duration."""
    if isinstance(duration, dt.timedelta):
        return max(0.0, duration.total_seconds())
    if isinstance(duration, (int, float)) and not isinstance(duration, bool):
        if not math.isfinite(duration):
            raise ValueError(f"ctx.sleep() duration must be a finite number of seconds, got {duration!r}")
        return max(0.0, float(duration))
    return parse_duration(duration)


def checked_duration(call: str, seconds: float) -> float:
    """seconds, unless it is past what the platform can store (ValueError)."""
    if not math.isfinite(seconds) or seconds > MAX_DURATION_S:
        raise ValueError(f"{call} duration of {seconds:g} s is longer than the platform's limit of 10,000 years")
    return seconds


def encode_match(match: Any) -> str | None:
    """The match filter of a wait as JSON text (an object), or None for none."""
    if match is None:
        return None
    if not isinstance(match, dict):
        raise ValueError(f"ctx.wait_for_event() match must be a dict of the fields an event's data must "
                         f"contain, got {type(match).__name__}")
    try:
        return json.dumps(match, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"ctx.wait_for_event() match must be JSON ({e})") from None


def _well_formed(entry: Any, position: int) -> bool:
    """Whether entry is a read-ahead entry for position the context can answer from."""
    return (isinstance(entry, dict) and entry.get("position") == position
            and isinstance(entry.get("name"), str) and entry.get("kind") in _AHEAD_KINDS
            and isinstance(entry.get("attempt"), int) and not isinstance(entry.get("attempt"), bool)
            and (entry.get("result") is None or isinstance(entry.get("result"), str)))


class WorkflowContext(TaskContext):
    """The first argument of a workflow: everything a TaskContext has (task_id is the
    run's id, attempt counts activations), plus checkpoint calls into the run's log.

    `step_attempt` is, inside a step's function, which try of that step this is
    (1 for the first); None outside a step. Make ctx calls from the workflow's
    own thread, one at a time, and never from inside a step's function.
    """

    def __init__(self, *, channel: ch.StepChannel, policy: RetryPolicy | None = None, **fields: Any):
        super().__init__(**fields)
        self._channel = channel
        self._policy = policy if policy is not None else RetryPolicy()
        self._position = 0
        self._halt: BaseException | None = None
        self._in_step: str | None = None
        # Positions follow call order, so calls from two threads would number at random.
        self._thread = threading.get_ident()
        self.step_attempt: int | None = None
        # (name, fn, args, kwargs) of each ctx.on_cancel passed, in order (again on every replay).
        self._compensations: list[tuple[str, Callable[..., Any], tuple, dict]] = []
        # The completed entries read ahead of the position, in order (see the module docstring).
        self._ahead: deque[dict] = deque()

    @classmethod
    def of(cls, ctx: TaskContext, channel: ch.StepChannel, policy: RetryPolicy | None = None) -> WorkflowContext:
        """A WorkflowContext for the attempt ctx describes, sharing its cancel signal
        (a cancel sent to ctx is seen by the workflow). Make it on the workflow's thread."""
        return cls(channel=channel, policy=policy, task_id=ctx.task_id, attempt=ctx.attempt,
                   max_attempts=ctx.max_attempts, lease_epoch=ctx.lease_epoch, task_type=ctx.task_type,
                   on_heartbeat=ctx._on_heartbeat, cancel_event=ctx._cancel_event(),
                   last_checkpoint=ctx.last_checkpoint, schedule_id=ctx.schedule_id,
                   scheduled_time=ctx.scheduled_time, on_checkpoint=ctx._on_checkpoint)

    @property
    def position(self) -> int:
        """The log position the next checkpoint call takes."""
        return self._position

    @property
    def halted(self) -> BaseException | None:
        """What stopped the activation (a WorkflowInterrupt or WorkflowVersionError), if anything;
        it decides the outcome even when the workflow caught it."""
        return self._halt

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) once per run: its value (JSON, up to 256 KiB) is logged, and
        a later activation gets the logged value without calling fn again.

        If fn raises, the error is logged and re-raised here: a FatalError or a class the
        workflow's policy calls non-retryable is final (later activations raise StepFailed),
        any other is retried when the activation is (`ctx.step_attempt` then grows).
        """
        self._enter("step", name)
        if not callable(fn):
            raise TypeError(f"ctx.step({name!r}, fn): fn must be callable, got {fn!r}")
        position = self._position
        reply = self._ask(ch.request("begin", "step", position, name), (ch.RUN, ch.DONE))
        self._position += 1
        if reply["status"] == ch.DONE:
            return self._stored(name, reply)
        return self._execute(position, name, int(reply.get("attempt") or 1), fn, args, kwargs)

    def version(self, name: str, latest: int = 1) -> int:
        """Which branch of changed code this run takes at marker `name`: `latest` for a run
        reaching the marker for the first time (recorded, so it stays), the branch recorded
        for a run that passed it, 0 for a run that passed this point before the marker
        existed (old code). Branch on it: `if ctx.version("new-billing", latest=1) >= 1:`."""
        self._enter("version", name)
        if isinstance(latest, bool) or not isinstance(latest, int) or latest < 1:
            raise ValueError(f"ctx.version({name!r}) latest must be an integer of at least 1, got {latest!r}")
        position = self._position
        reply = self._ask(ch.request("begin", "version", position, name, version=latest), (ch.DONE, ch.ABSENT))
        if reply["status"] == ch.ABSENT:
            return 0  # the run predates the marker; it takes no position (ABSENT wrote nothing)
        self._position += 1
        branch = self._decode(reply.get("result"), f"version marker {name!r}")
        if isinstance(branch, bool) or not isinstance(branch, int) or not 1 <= branch <= latest:
            self._poison(WorkflowVersionError(
                f"run {self.task_id} recorded branch {branch!r} at version marker {name!r}, but this code's latest "
                f"is {latest}: keep the code of every branch a live run may have recorded", position=position,
                name=name, logged_name=name, logged_kind="version"))
        return branch

    def sleep(self, name: str, duration: str | int | float | dt.timedelta | None = None, *,
              seconds: float | None = None, minutes: float | None = None, hours: float | None = None,
              days: float | None = None) -> None:
        """Sleep durably: the run suspends (no sandbox is held) and resumes once the time
        has passed, even across deploys and restarts. `duration` is "1d", "90m", seconds or
        a timedelta; or give seconds=, minutes=, hours=, days=. A duration of 0 or less
        (say, a deadline already past) is logged and returns at once."""
        self._enter("sleep", name)
        total = sleep_seconds(duration, {"seconds": seconds, "minutes": minutes, "hours": hours, "days": days})
        position = self._position
        reply = self._ask(ch.request("begin", "sleep", position, name, duration_s=total), (ch.DONE, ch.SUSPEND))
        self._position += 1
        if reply["status"] == ch.SUSPEND:
            self._suspend(position, reply)

    def wait_for_event(self, name: str, match: dict | None = None,
                       timeout: str | int | float | None = None) -> Any:
        """Wait durably for an event called `name` whose data contains every field of
        `match`, and return its data (a dict). An event sent to this run before the wait
        counts (oldest first); a broadcast counts only once the run waits. With `timeout`
        ("3d", or seconds) raises the builtin TimeoutError when none came in time."""
        self._enter("wait", name)
        match_text = encode_match(match)
        timeout_s = None if timeout is None else checked_duration("ctx.wait_for_event() timeout",
                                                                  parse_duration(timeout))
        position = self._position
        reply = self._ask(ch.request("begin", "wait", position, name, match=match_text, duration_s=timeout_s),
                          (ch.DONE, ch.SUSPEND))
        self._position += 1
        if reply["status"] == ch.SUSPEND:
            self._suspend(position, reply)
        error = reply.get("error")
        if error:
            if error.get("error_class") == "TimeoutError":
                raise TimeoutError(error.get("message") or f"no event {name!r} came within {timeout!r}")
            raise StepFailed(name, str(error.get("error_class")), str(error.get("message")))
        return self._decode(reply.get("result"), f"the event {name!r}")

    def parallel(self, name: str, calls: list[tuple[Any, Any]], on_failure: str = "collect") -> list[Any]:
        """Run each (handler, input) of calls as a child (a task or run of the app, with its own
        retries and timeouts) and return when they are done, their results in call order.

        handler is a @task or @workflow function of the app, or its name. With
        on_failure="collect" (the default) the list holds a ChildError in the place of each
        child that did not succeed (returned, not raised); with "fail_fast" the first failure
        cancels the other children and raises ChildFailed naming it. The run suspends while
        the children run (no sandbox is held)."""
        from ratchet.workflow import fanout  # (not at import: it loads the executor's limits)

        self._enter("parallel", name)
        if on_failure not in ch.ON_FAILURE:
            raise ValueError(f"ctx.parallel({name!r}) on_failure must be 'collect' or 'fail_fast', "
                             f"got {on_failure!r}")
        specs = fanout.children(f"ctx.parallel({name!r})", calls, self._resolve_handler)
        values = self._fan_out("parallel", name, specs, on_failure)
        failed = fanout.first_failure(values) if on_failure == "fail_fast" else None
        if failed is not None:
            raise ChildFailed(name, failed)
        return values

    def child(self, name: str, handler: Any, input: Any = None) -> Any:
        """Run handler (a @task or @workflow function of the app, or its name) on input as one
        child and return its result; raise ChildFailed if it did not succeed. The run
        suspends while the child runs."""
        from ratchet.workflow import fanout

        self._enter("child", name)
        specs = fanout.children(f"ctx.child({name!r})", [(handler, input)], self._resolve_handler)
        (value,) = self._fan_out("child", name, specs, "collect")
        if isinstance(value, ChildError):
            raise ChildFailed(name, value)
        return value

    def on_cancel(self, fn: Callable[..., Any], /, *args: Any, name: str | None = None, **kwargs: Any) -> None:
        """Register fn(*args, **kwargs) as a compensation: nothing runs now. If the run is
        cancelled later, it replays to the point it had reached and then runs every
        registered compensation, the last registered first, each once (a memoized step:
        `ctx.step_attempt` inside), and ends CANCELED. One that raises a retryable error is
        tried again by the run's next activation; a fatal one is logged FAILED and the
        others still run. `name` (default: fn's name) is what the log shows."""
        if not callable(fn):
            raise TypeError(f"ctx.on_cancel(fn): fn must be callable, got {fn!r}")
        if inspect.iscoroutinefunction(fn):  # it would never run: refused now, not after a cancel
            raise TypeError(f"ctx.on_cancel(fn): fn {fn!r} is an async function; pass a plain one, e.g. "
                            f"`lambda: asyncio.run(undo(order))`")
        label = compensation_name(fn) if name is None else name
        self._enter("on_cancel", label)
        position = self._position
        self._ask(ch.request("begin", "on_cancel", position, label, result=logged_args(args, kwargs)), (ch.DONE,))
        self._position += 1
        self._compensations.append((label, fn, args, kwargs))

    @property
    def compensations(self) -> list[str]:
        """The names of the compensations registered so far, in registration order."""
        return [name for name, _fn, _args, _kwargs in self._compensations]

    def _compensate(self) -> BaseException | None:
        """Run the registered compensations, last first, after a WorkflowCancelled stopped the
        code: None when each has run (or had, per the log), else what stops the activation: a
        compensation's retryable exception (committed; the next activation tries again) or an
        interrupt of the platform's (also in `halted`). A fatal one is committed and skipped."""
        self._halt = None  # the cancel was expected; what stops the compensations is what counts
        for name, fn, args, kwargs in reversed(self._compensations):
            try:
                failure = self._compensate_one(name, fn, args, kwargs)
            except BaseException as exc:  # noqa: BLE001 -- an interrupt, or a BaseException from fn
                return self._halt if self._halt is not None else exc
            if failure is not None:
                return failure
        return None

    def _compensate_one(self, name: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Exception | None:
        """One compensation as a memoized step at the next position; its retryable error, if any."""
        from ratchet.sandbox.execute import error_info

        step_name, position = compensate_name(name), self._position
        reply = self._ask(ch.request("begin", "compensate", position, step_name), (ch.RUN, ch.DONE))
        self._position += 1
        if reply["status"] == ch.DONE:
            return None  # it ran in an earlier activation (succeeded, or failed for good)
        self.step_attempt, self._in_step = int(reply.get("attempt") or 1), step_name
        try:
            text = self._encode(step_name, self._call_step(step_name, fn, args, kwargs))
        except Exception as exc:  # noqa: BLE001 -- every error of a compensation is logged
            fatal = isinstance(exc, FatalError) or self._policy.is_non_retryable(exc)
            self._commit(position, step_name, kind="compensate", error=error_info(exc, skip_files=(__file__,)),
                         fatal=fatal)
            return None if fatal else exc
        finally:
            self.step_attempt, self._in_step = None, None
        self._commit(position, step_name, kind="compensate", result=text)
        return None

    # ---- internals ------------------------------------------------------------------------

    def _resolve_handler(self, handler: Any) -> None:
        """Sees each decorated handler a fan-out names (ratchet.testing learns the app from it)."""

    def _fan_out(self, kind: str, name: str, specs: list[dict], on_failure: str) -> list[Any]:
        """The children's outcomes once the fan-out at the next position is done; suspends
        the activation while it is not (the agent has started its children)."""
        from ratchet.workflow import fanout

        position = self._position
        reply = self._ask(ch.request("begin", kind, position, name, children=specs, on_failure=on_failure),
                          (ch.DONE, ch.SUSPEND))
        self._position += 1
        if reply["status"] == ch.SUSPEND:
            self._suspend(position, reply)
        try:
            values = fanout.outcomes(reply.get("children"), len(specs), complete=on_failure == "collect")
        except fanout.BadOutcomes as e:
            self._stop(StepUnavailable(f"the platform's answer to {_CALL[kind]}({name!r}) at position {position} "
                                       f"is malformed: {e}"))
        if on_failure == "fail_fast" and fanout.first_failure(values) is None and None in values:
            self._stop(StepUnavailable(f"the platform answered {_CALL[kind]}({name!r}) at position {position} done "
                                       f"with children missing and none failed"))
        return values


    def _enter(self, kind: str, name: Any) -> None:
        """Refuse a call the log could not number reliably, before it reaches the platform."""
        if self._halt is not None:
            raise self._halt  # code that caught the stop must not act past it
        if self._ended:
            raise RuntimeError(f"{_CALL[kind]}() called after activation {self.attempt} of run {self.task_id} "
                               f"ended; make checkpoint calls from the workflow function itself")
        if threading.get_ident() != self._thread:
            raise RuntimeError(f"{_CALL[kind]}() called from another thread; make checkpoint calls from the "
                               f"workflow's own thread, one at a time (their order numbers the log)")
        if self._in_step is not None:
            raise RuntimeError(f"{_CALL[kind]}() called inside step {self._in_step!r}; steps do not nest: "
                               f"make it from the workflow function")
        check_name(kind, name)

    def _ask(self, request: dict, expected: tuple[str, ...]) -> dict:
        """The platform's reply when its status is one of expected; else the activation stops."""
        reply = self._local(request)
        if reply is None:
            reply = self._channel.call(request)
            self._read_ahead(request, reply)
        status = reply.get("status") if isinstance(reply, dict) else None
        if status in expected:
            return reply
        kind, name, position = request["kind"], request["name"], request["position"]
        if status == ch.MISMATCH:
            self._poison(self._mismatch(kind, name, position, reply))
        if status == ch.CANCELLED and request["op"] == "begin" and kind not in ("compensate", "on_cancel"):
            # The run had not passed this point when it was cancelled: stop here; the
            # compensations take the positions from compensate_from on (this one, or the next
            # when a checkpoint left open here keeps its entry).
            start = reply.get("compensate_from")
            self._position = start if isinstance(start, int) and start >= position else position
            self._stop(WorkflowCancelled(position))  # (where the code stopped, as its message says)
        message = reply.get("message") if isinstance(reply, dict) else None
        if status == ch.LOST:
            self._stop(LeaseLost(message or f"run {self.task_id}: the lease of activation {self.attempt} is gone"))
        if status == ch.ERROR and reply.get("fatal") is True:
            self._poison(StepRefused(f"the platform refused {_CALL[kind]}({name!r}) at log position {position}: "
                                     f"{message or 'no reason given'}"))
        if status == ch.ERROR:
            self._stop(StepUnavailable(message or f"the platform could not record {_CALL[kind]}({name!r})"))
        self._stop(StepUnavailable(f"the platform answered {status!r} to {request['op']} of {_CALL[kind]}({name!r}) "
                                   f"at position {position}, a reply it does not expect"))

    def _local(self, request: dict) -> dict | None:
        """The reply history would give to request, from the entry read ahead for its position;
        None when there is none (the request goes to the platform)."""
        if request["op"] != "begin" or request["kind"] not in _ANSWERED_AHEAD:
            return None
        while self._ahead and self._ahead[0]["position"] < request["position"]:
            self._ahead.popleft()  # (passed: never the case while positions follow the calls)
        if not self._ahead or self._ahead[0]["position"] != request["position"]:
            self._ahead.clear()
            return None
        entry, kind = self._ahead[0], request["kind"]
        if entry["kind"] != kind or entry["name"] != request["name"]:
            if kind == "version":  # the run passed here before the marker existed: it takes no position
                return {"status": ch.ABSENT, "attempt": 0}
            return {"status": ch.MISMATCH, "logged_name": entry["name"], "logged_kind": entry["kind"]}
        self._ahead.popleft()
        return {"status": ch.DONE, "attempt": entry["attempt"], "result": entry["result"], "error": None}

    def _read_ahead(self, request: dict, reply: Any) -> None:
        """Keep the entries a DONE reply read ahead of request's position (replacing any kept),
        up to the first that is not the next position's well-formed entry."""
        self._ahead.clear()
        ahead = reply.get("ahead") if isinstance(reply, dict) and reply.get("status") == ch.DONE else None
        if not isinstance(ahead, list):
            return
        position = request["position"] + 1
        for entry in ahead:
            if not _well_formed(entry, position):
                break
            self._ahead.append(entry)
            position += 1

    def _mismatch(self, kind: str, name: str, position: int, reply: dict) -> WorkflowVersionError:
        logged_name, logged_kind = reply.get("logged_name"), reply.get("logged_kind")
        logged = f"{_CALL.get(str(logged_kind).lower(), str(logged_kind))}({logged_name!r})"
        if logged_name == name and str(logged_kind).lower() == kind:  # a fan-out of another size
            logged += " with another number of children"
        return WorkflowVersionError(
            f"the code of workflow {self.task_type!r} no longer matches run {self.task_id}: its checkpoint call at "
            f"log position {position} is {_CALL[kind]}({name!r}) but the run's log has {logged} there (a step was "
            f"added, removed, renamed or reordered under a live run); put the change behind ctx.version() so runs "
            f"that passed this point keep their path", position=position, name=name, logged_name=logged_name,
            logged_kind=logged_kind)

    def _poison(self, error: FatalError) -> NoReturn:
        self._halt = error
        raise error

    def _stop(self, interrupt: BaseException) -> NoReturn:
        self._halt = interrupt
        raise interrupt

    def _suspend(self, position: int, reply: dict) -> NoReturn:
        wake = reply.get("wake_after_s")
        try:
            wake_s = None if wake is None else max(0.0, float(wake))
        except (TypeError, ValueError):
            self._stop(StepUnavailable(f"the platform answered a wake_after_s of {wake!r}, not a number"))
        self._stop(WorkflowSuspended(position, wake_s))

    def _decode(self, text: Any, what: str) -> Any:
        if text is None:
            return None
        try:
            return json.loads(text)
        except (TypeError, ValueError):
            self._stop(StepUnavailable(f"the platform's log holds {what} as something that is not JSON: {text!r:.200}"))

    def _stored(self, name: str, reply: dict) -> Any:
        """The outcome the log holds for a step: its value, or its fatal error as StepFailed."""
        error = reply.get("error")
        if error:
            raise StepFailed(name, str(error.get("error_class")), str(error.get("message")))
        return self._decode(reply.get("result"), f"step {name!r}'s result")

    def _execute(self, position: int, name: str, attempt: int, fn: Callable[..., Any], args: tuple,
                 kwargs: dict) -> Any:
        """Run a claimed step and commit what happened; an exception is committed and re-raised.
        (A BaseException such as KeyboardInterrupt is not committed: the claim stays, and the
        next activation runs the step again with a higher step_attempt.)"""
        from ratchet.sandbox.execute import error_info  # (not at import: `import ratchet` stays light)

        self.step_attempt, self._in_step = attempt, name
        try:
            text = self._encode(name, self._call_step(name, fn, args, kwargs))
        except Exception as exc:
            fatal = isinstance(exc, FatalError) or self._policy.is_non_retryable(exc)
            self._commit(position, name, error=error_info(exc, skip_files=(__file__,)), fatal=fatal)
            raise
        finally:
            self.step_attempt, self._in_step = None, None
        self._commit(position, name, result=text)
        return json.loads(text)  # the value as the log holds it: what a replay returns

    def _call_step(self, name: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """Call a step's function (ratchet.testing overrides this to inject failures)."""
        return fn(*args, **kwargs)

    @staticmethod
    def _encode(name: str, value: Any) -> str:
        from ratchet.sandbox.execute import encode_result

        if inspect.iscoroutine(value):  # an async def passed as fn: it never ran
            value.close()
            raise ResultNotSerializable(f"step {name!r} returned a coroutine: its async function never ran; "
                                        f"pass a plain function, e.g. `lambda: asyncio.run(fetch(url))`")
        try:
            return encode_result(value)
        except (ResultNotSerializable, ResultTooLarge) as e:
            raise type(e)(e.message.replace("the handler", f"step {name!r}", 1)) from None

    def _commit(self, position: int, name: str, kind: str = "step", **outcome: Any) -> None:
        self._ask(ch.request("commit", kind, position, name, **outcome), (ch.DONE,))

    def __repr__(self) -> str:
        return (f"WorkflowContext(task_id={self.task_id!r}, task_type={self.task_type!r}, "
                f"attempt={self.attempt}/{self.max_attempts}, position={self._position})")
