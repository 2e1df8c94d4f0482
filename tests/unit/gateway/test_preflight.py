"""The deploy preflight's parts against a fake history client (the peer across the
HistoryService contract): which handlers a deployment drops, the sum over shards of each
one's live tasks, the refusal's text, and an unanswering shard as UNAVAILABLE."""

from __future__ import annotations

import asyncio

import pytest

from ratchet.api.tasks.v1 import tasks_pb2 as S
from ratchet.libs.rpc.errors import DeadlineExceeded, FailedPrecondition, Unavailable
from ratchet.services.gateway.preflight import LIVE_STATES, PREFLIGHT_TIMEOUT_S, Preflight, dropped, refusal

pytestmark = pytest.mark.timeout(30)


class FakeHistory:
    """CountTasks from a table {(shard, task_type): count}; shards in `slow` time out."""

    def __init__(self, table: dict[tuple[int, str], int], slow: frozenset[int] = frozenset()):
        self.table, self.slow, self.calls = table, slow, []

    async def count_tasks(self, req, timeout: float) -> int:
        self.calls.append((req, timeout))
        await asyncio.sleep(0)
        if req.shard_id in self.slow:
            raise DeadlineExceeded(f"shard {req.shard_id} did not answer within {timeout:g}s",
                                   shard_id=str(req.shard_id))
        return self.table.get((req.shard_id, req.filter.task_type), 0)


def over(fake: FakeHistory, shards: list[int]) -> Preflight:
    return Preflight(fake, shards)  # type: ignore[arg-type]  # (a duck-typed fake of HistoryClient)


def test_dropped_is_what_the_active_deployment_has_and_the_new_one_lacks():
    assert dropped(["send", "resize", "onboard"], ["send", "report"]) == ["onboard", "resize"]
    assert dropped(["send"], ["send", "report"]) == []


def test_the_refusal_names_each_live_handler_and_its_count_and_how_to_proceed():
    assert refusal("default", {"resize": 0}) is None
    err = refusal("default", {"resize": 3, "onboard": 1, "gone": 0})
    assert isinstance(err, FailedPrecondition)
    assert "'onboard' (1 live), 'resize' (3 live)" in err.message and "gone" not in err.message
    assert "UnknownTaskType" in err.message and "ratchet deploy --allow-dropping-live-handlers" in err.message
    assert err.fields == {"dropped_live_handlers": "onboard=1,resize=3"}


async def test_live_counts_sum_every_shard_with_the_live_states_within_half_the_deadline():
    fake = FakeHistory({(0, "resize"): 2, (3, "resize"): 5, (1, "onboard"): 1})
    got = await over(fake, [3, 0, 1, 2]).live_counts("t", "a", ["onboard", "resize"], 4.0)
    assert got == {"onboard": 1, "resize": 7}
    assert sorted((r.shard_id, r.filter.task_type) for r, _ in fake.calls) == [
        (s, ty) for s in range(4) for ty in ("onboard", "resize")]
    assert all(list(r.filter.states) == list(LIVE_STATES) and (r.tenant_id, r.app_id) == ("t", "a") and t == 2.0
               for r, t in fake.calls)
    assert S.TASK_STATE_WAITING in LIVE_STATES and S.TASK_STATE_FAILED not in LIVE_STATES
    await over(fake, [0]).live_counts("t", "a", ["x"], 60.0)
    assert fake.calls[-1][1] == PREFLIGHT_TIMEOUT_S


async def test_no_dropped_handler_makes_no_call_and_a_silent_shard_is_unavailable():
    fake = FakeHistory({}, slow=frozenset({2}))
    assert await over(fake, [0, 1, 2]).live_counts("t", "a", [], 4.0) == {}
    assert fake.calls == []
    with pytest.raises(Unavailable, match="shard 2 did not answer") as e:
        await over(fake, [0, 1, 2]).live_counts("t", "a", ["resize"], 4.0)
    assert "Nothing was deployed" in e.value.message and e.value.fields == {"shard_id": "2"}
    with pytest.raises(Unavailable, match="no history peer"):
        await Preflight(None, [0]).live_counts("t", "a", ["resize"], 4.0)
