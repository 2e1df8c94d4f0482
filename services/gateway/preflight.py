"""The deploy preflight (docs/design/workflows-protocol.md, "Deploy preflight (Q3)").

A deployment that drops a handler the app's live tasks or workflow runs still use would
strand them: they fail with UnknownTaskType when they next run. CreateDeployment counts
them first and refuses (FAILED_PRECONDITION, naming each handler and its count) unless
the request sets allow_dropping_live_handlers. The count is all or nothing: a shard that
does not answer fails the deploy UNAVAILABLE rather than let it pass unchecked.

Only a deployment that drops handlers costs CountTasks calls (one per dropped handler
per shard, all at once); one that keeps or adds handlers costs none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from ratchet.api.tasks.v1 import tasks_pb2 as S
from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.rpc.errors import DeadlineExceeded, FailedPrecondition, ServiceError, Unavailable
from ratchet.services.gateway.fanout import each_shard
from ratchet.services.gateway.history_client import HistoryClient

# The states in which a task or run will still be handed to a sandbox (WAITING: a suspended
# run that a timer or an event makes ENQUEUED again).
LIVE_STATES = (S.TASK_STATE_ENQUEUED, S.TASK_STATE_LEASED, S.TASK_STATE_RETRY_WAIT, S.TASK_STATE_WAITING)
# The preflight's own bound: at most half the request's deadline (the rest stores and answers,
# so a silent shard is reported UNAVAILABLE before the caller gives up), and never over this.
PREFLIGHT_TIMEOUT_S = 5.0
FLAG_HINT = ("`ratchet deploy --allow-dropping-live-handlers` (allow_dropping_live_handlers=true in "
             "CreateDeployment)")


def dropped(active: Iterable[str], new: Iterable[str]) -> list[str]:
    """The active deployment's handler names the new one no longer registers, sorted."""
    return sorted(set(active) - set(new))


def refusal(app: str, live: dict[str, int]) -> FailedPrecondition | None:
    """The FAILED_PRECONDITION for the dropped handlers with live tasks (None if none has any)."""
    named = [(name, n) for name, n in sorted(live.items()) if n > 0]
    if not named:
        return None
    listed = ", ".join(f"{name!r} ({n} live)" for name, n in named)
    return FailedPrecondition(
        f"this deployment drops handlers that live tasks or workflow runs of app {app!r} still use "
        f"(queued, running, retrying or waiting): {listed}; if it were deployed, those tasks and runs would "
        f"fail with UnknownTaskType when they next run. Nothing was deployed. Keep the handlers until they "
        f"drain (or cancel those tasks), or deploy anyway with {FLAG_HINT}",
        dropped_live_handlers=",".join(f"{name}={n}" for name, n in named))


class Preflight:
    """Counts an app's live tasks and runs of given types on every shard."""

    def __init__(self, history: HistoryClient | None, shard_ids: list[int]):
        self.history = history
        self.shard_ids = sorted(shard_ids)

    async def live_counts(self, tenant_id: str, app_id: str, types: list[str], timeout: float) -> dict[str, int]:
        """{task_type: live tasks/runs of the app} summed over every shard; UNAVAILABLE naming the
        shards that did not answer (never a partial count)."""
        if not types:
            return {}
        history = self.history
        if history is None:
            raise Unavailable("the gateway has no history peer, so the deploy preflight cannot count the live "
                              "tasks of the handlers this deployment drops; nothing was deployed")
        bound = max(0.001, min(timeout / 2, PREFLIGHT_TIMEOUT_S))

        async def shard(s: int) -> list[int]:
            outcomes = await asyncio.gather(*(history.count_tasks(history_pb2.CountTasksRequest(
                shard_id=s, tenant_id=tenant_id, app_id=app_id,
                filter=S.TaskFilter(states=LIVE_STATES, task_type=t)), bound) for t in types),
                return_exceptions=True)
            counts: list[int] = []
            for o in outcomes:  # (every call has ended: none is left running past the deploy)
                if isinstance(o, BaseException):
                    raise o
                counts.append(o)
            return counts

        try:
            per_shard = await each_shard(self.shard_ids, shard)
        except (Unavailable, DeadlineExceeded) as e:
            raise _unanswered(e) from None
        return {t: sum(counts[i] for counts in per_shard.values() if counts is not None)
                for i, t in enumerate(types)}


def _unanswered(e: ServiceError) -> Unavailable:
    """UNAVAILABLE (a shard that timed out too): the deploy can be retried as it is."""
    return Unavailable(f"the deploy preflight could not count the live tasks of the handlers this deployment "
                       f"drops: {e.message}. Nothing was deployed; retry when every shard answers", **e.fields)
