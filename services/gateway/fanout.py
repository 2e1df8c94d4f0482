"""One call per shard, concurrently, for the RPCs that span every shard
(ListTasks, RetryTasks/CancelTasks and their operations).

All or nothing: a shard that is down fails the whole call with UNAVAILABLE
naming every shard that did not answer, never a silently partial answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from ratchet.libs.rpc import errors

T = TypeVar("T")


def _down_error(down: list[tuple[int, errors.ServiceError]]) -> errors.ServiceError:
    ids = ", ".join(str(s) for s, _ in down)
    unavailable = [e for _, e in down if isinstance(e, errors.Unavailable)]
    first = (unavailable or [down[0][1]])[0]
    noun = "shard" if len(down) == 1 else "shards"
    cls = errors.Unavailable if unavailable else errors.DeadlineExceeded
    return cls(f"{noun} {ids} did not answer, so no partial answer is given ({first.message})",
               shard_id=",".join(str(s) for s, _ in down))


async def each_shard(shards: Iterable[int], call: Callable[[int], Awaitable[T]], *,
                     missing_ok: bool = False) -> dict[int, T | None]:
    """{shard: result} of call(shard) on every shard at once.

    With missing_ok, a shard answering NOT_FOUND maps to None. Any other error
    is raised: definitive ones (a 400 from a shard) before unavailability.
    """
    shards = list(shards)
    outcomes = await asyncio.gather(*(call(s) for s in shards), return_exceptions=True)
    out: dict[int, T | None] = {}
    down: list[tuple[int, errors.ServiceError]] = []
    failed: list[BaseException] = []
    for s, o in zip(shards, outcomes, strict=True):
        if isinstance(o, (errors.Unavailable, errors.DeadlineExceeded)):
            down.append((s, o))
        elif missing_ok and isinstance(o, errors.NotFound):
            out[s] = None
        elif isinstance(o, BaseException):
            failed.append(o)
        else:
            out[s] = o
    for f in failed:
        if isinstance(f, errors.ServiceError) or not isinstance(f, Exception):
            raise f
        raise errors.Internal(f"shard call failed: {type(f).__name__}: {f}") from f
    if down:
        raise _down_error(down)
    return out
