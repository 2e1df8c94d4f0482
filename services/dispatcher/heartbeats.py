"""Heartbeats: extend every lease an agent holds, one RecordHeartbeats call
per shard, all shards at once, answers in request order.

A shard whose call fails transiently answers its leases CONTINUE with the
reason "shard unavailable, lease unchanged". That is safe because the lease
is fenced at the data, not here: the lease was not extended, so if the shard
stays away past the lease's expiry history's timer expires it and bumps the
epoch; the agent's next heartbeat then answers LEASE_LOST and any completion
it sends carries a stale epoch and is rejected with no effect. The cost of a
brief shard blip is therefore at most a duplicate run explained by lease
expiry (the at-least-once contract), never a lost or forked task; answering
CANCEL or LEASE_LOST instead would kill healthy work over a blip. Only when
every shard failed does the call fail with UNAVAILABLE, so the agent retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from ratchet.internal.worker.v1 import worker_pb2 as wpb
from ratchet.services.dispatcher.errors import CallUnavailable, ShardUnavailable
from ratchet.services.dispatcher.grouping import chunked, group_by_shard, merge_in_order, pick
from ratchet.services.dispatcher.history_client import HistoryClient

log = logging.getLogger(__name__)

UNCHANGED_REASON = "shard unavailable, lease unchanged"
# History takes at most this many leases per RecordHeartbeats.
MAX_PER_CALL = 1000


def unchanged(leases: Sequence[wpb.LeaseRef]) -> list[wpb.HeartbeatResult]:
    """CONTINUE answers for leases whose shard could not be reached."""
    return [wpb.HeartbeatResult(task_id=ref.task_id, lease_epoch=ref.lease_epoch,
                                action=wpb.LEASE_ACTION_CONTINUE, reason=UNCHANGED_REASON)
            for ref in leases]


async def record_heartbeats(history: HistoryClient, leases: Sequence[wpb.LeaseRef],
                            caller_remaining_s: float | None = None) -> list[wpb.HeartbeatResult]:
    """One HeartbeatResult per lease, in request order. A shard that does not
    answer before the caller's deadline counts as unavailable, so one hung
    shard cannot make the whole heartbeat time out."""
    if not leases:
        return []
    groups = chunked(group_by_shard(leases, lambda ref: ref.shard_id), MAX_PER_CALL)
    keys = list(groups)
    timeout = history.budget(caller_remaining_s)
    outcomes = await asyncio.gather(
        *(history.record_heartbeats(shard, pick(leases, groups[(shard, n)]), timeout) for shard, n in keys),
        return_exceptions=True)
    answers: dict[tuple[int, int], Sequence[wpb.HeartbeatResult]] = {}
    failed: list[ShardUnavailable] = []
    for key, outcome in zip(keys, outcomes, strict=True):
        if isinstance(outcome, ShardUnavailable):
            failed.append(outcome)
            answers[key] = unchanged(pick(leases, groups[key]))
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            answers[key] = outcome.results
    if len(failed) == len(keys):
        raise CallUnavailable(f"no lease was extended: {'; '.join(str(e) for e in failed)}")
    for err in failed:
        log.warning("heartbeats for shard %d not recorded (%s); answered CONTINUE, lease unchanged",
                    err.shard_id, err)
    return merge_in_order(len(leases), groups, answers)

