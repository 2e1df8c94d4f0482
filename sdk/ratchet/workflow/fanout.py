"""ctx.parallel / ctx.child: the children a fan-out names, and the outcomes it returns.

The checks run before anything is sent, so a bad call fails where it is written
(ValueError/TypeError naming the child) and never reaches the platform: 1..10,000
children, each a @task or @workflow function (its declared name is sent) or a
handler name, each input JSON of at most 256 KiB, and all of them within one
step frame. The reply's outcomes (docs/design/workflows-protocol.md, "Fan-out")
become a list in call order, a ChildError in the place of each child that did
not succeed.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable
from typing import Any

from ratchet.errors import ChildError
from ratchet.sandbox.execute import MAX_RESULT_BYTES
from ratchet.sandbox.protocol import MAX_FRAME_BYTES
from ratchet.task import NAME_PATTERN, spec_of

MAX_CHILDREN = 10_000
SUCCEEDED = "SUCCEEDED"
# What the step frame carries besides the children (its other fields, the JSON escaping
# of a stack-free request): the children get the rest of a frame.
_FRAME_HEADROOM = 16 * 1024
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def handler_name(call: str, index: int, handler: Any) -> str:
    """The task type a child runs: a decorated function's declared name, or a name."""
    if isinstance(handler, str):
        if not NAME_PATTERN.fullmatch(handler):
            raise ValueError(f"{call} child {index}: handler name must be 1..200 characters of "
                             f"[A-Za-z0-9_.:-], got {handler!r}")
        return handler
    spec = spec_of(handler) if callable(handler) else None
    if spec is None:
        raise TypeError(f"{call} child {index}: the handler must be a @task or @workflow function of the app, "
                        f"or its name, got {handler!r}")
    return spec.name


def encode_input(call: str, index: int, value: Any) -> str:
    """A child's input as the JSON text it is enqueued with (<= 256 KiB)."""
    try:
        text = _ENCODE(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{call} child {index}: the input must be JSON (dicts, lists, strings, numbers, "
                        f"booleans, None): {e}") from None
    size = len(text.encode("utf-8"))
    if size > MAX_RESULT_BYTES:
        raise ValueError(f"{call} child {index}: the input is {size} bytes of JSON, over the "
                         f"{MAX_RESULT_BYTES}-byte limit; pass a reference (an id, a URL) instead of the data")
    return text


def children(call: str, calls: Any, resolve: Callable[[Any], None] = lambda handler: None) -> list[dict]:
    """The step frame's `children` for calls, a list (or any iterable) of (handler, input);
    resolve(handler) sees each decorated handler (ratchet.testing learns the app's code
    from it). An iterable is read up to one past the limit, so an endless one is refused."""
    if isinstance(calls, (str, bytes, dict)) or not isinstance(calls, Iterable):
        raise TypeError(f"{call} calls must be a list of (handler, input) pairs, got {type(calls).__name__}")
    calls = list(itertools.islice(calls, MAX_CHILDREN + 1))
    if not 1 <= len(calls) <= MAX_CHILDREN:
        got = f"more than {MAX_CHILDREN:,}" if len(calls) > MAX_CHILDREN else "0"
        raise ValueError(f"{call} takes 1..{MAX_CHILDREN:,} children, got {got}; split larger work into "
                         f"several fan-outs, or fan out to child workflows that fan out in turn")
    out = []
    for index, pair in enumerate(calls):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"{call} child {index} must be a (handler, input) pair, got {pair!r:.200}")
        task_type = handler_name(call, index, pair[0])
        if not isinstance(pair[0], str):
            resolve(pair[0])
        out.append({"task_type": task_type, "payload": encode_input(call, index, pair[1])})
    check_frame_size(call, out)
    return out


def check_frame_size(call: str, specs: list[dict]) -> None:
    """The children must fit in one step frame (the stub's wire to the agent)."""
    size = len(_ENCODE(specs).encode("utf-8"))
    if size > MAX_FRAME_BYTES - _FRAME_HEADROOM:
        raise ValueError(f"{call}: the children's inputs take {size:,} bytes in the step frame, over the "
                         f"{MAX_FRAME_BYTES - _FRAME_HEADROOM:,} a fan-out can carry; pass references (ids, "
                         f"URLs) instead of the data, or split the fan-out")


class BadOutcomes(ValueError):
    """The platform's outcomes of a fan-out are malformed (the activation fails, retryably)."""


def outcomes(raw: Any, count: int, *, complete: bool) -> list[Any]:
    """The children's outcomes in call order: each a SUCCEEDED child's decoded result, a
    ChildError for any other, None where the reply has none (complete=False: fail_fast,
    whose children still running when it fired are absent). BadOutcomes when the reply
    does not hold what the platform promises."""
    if not isinstance(raw, list):
        raise BadOutcomes(f"the reply's children are {type(raw).__name__}, not a list")
    slots: list[Any] = [None] * count
    seen: set[int] = set()
    for item in raw:
        index = item.get("index") if isinstance(item, dict) else None
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count or index in seen:
            raise BadOutcomes(f"a child outcome's index is {index!r}, not a new one in 0..{count - 1}")
        seen.add(index)
        slots[index] = outcome(item)
    if complete and len(seen) != count:
        raise BadOutcomes(f"the reply holds {len(seen)} of the fan-out's {count} children's outcomes")
    return slots


def outcome(item: dict) -> Any:
    """One child's value, or its ChildError."""
    state, child_id = str(item.get("state") or ""), str(item.get("child_id") or "")
    if state == SUCCEEDED:
        text = item.get("result")
        try:
            return None if text is None else json.loads(text)
        except (TypeError, ValueError):
            raise BadOutcomes(f"child {item['index']}'s result is not JSON text: {text!r:.200}") from None
    raw_error = item.get("error")
    error: dict = raw_error if isinstance(raw_error, dict) else {}
    return ChildError(index=item["index"], child_id=child_id, state=state or "UNKNOWN",
                      error_class=str(error.get("error_class") or state or "ChildError"),
                      message=str(error.get("message") or f"the child ended {state or 'without a state'}"))


def first_failure(values: list[Any]) -> ChildError | None:
    """The failed child a fail_fast names: the lowest index that failed on its own, else
    (all were cancelled) the lowest cancelled one. Siblings cancelled because the fan-out
    fired may be recorded after it, so preferring a non-CANCELED child keeps the name the
    same on every replay."""
    errors = [v for v in values if isinstance(v, ChildError)]
    own = [e for e in errors if e.state != "CANCELED"]
    return (own or errors)[0] if errors else None
