"""The gateway's one enqueue path (enqueue.py): one form from every edge, its wire encoding,
routing, and single enqueues coalesced per shard with every caller answered alone."""

from __future__ import annotations

import asyncio

import pytest
from google.protobuf import duration_pb2, timestamp_pb2

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.rpc import errors
from ratchet.libs.shardmap import ShardMap, new_task_id
from ratchet.services.gateway import enqueue
from ratchet.services.gateway.auth import Principal
from ratchet.services.gateway.deployments import register
from ratchet.services.gateway.validation import PlainBatch, ValidTask

P = Principal("ten", "app", "")
RETRY = tasks_pb2.RetryPolicy(max_attempts=5)
TIMEOUTS = tasks_pb2.Timeouts()
MAP = ShardMap.even([1, 2])


def valid(key: str = "", task_id: str = "", fp: str = "", **kw) -> ValidTask:
    base = dict(task_type="send", queue="default", payload_json=b"{}", idempotency_key=key, delay=None,
                run_at=None, retry=RETRY, timeouts=TIMEOUTS, non_retryable=[], fingerprint=fp or ("f" if key else ""),
                task_id=task_id or (new_task_id() if not key else ""))
    base.update(kw)
    return ValidTask(**base)


def test_a_single_enqueue_is_a_batch_of_one_and_goes_as_columns_when_plain():
    t = enqueue.of_valid(P, [valid()], where="")
    req = enqueue.request(1, t, None)
    assert req.HasField("columns") and not req.tasks
    assert list(req.columns.task_ids) == t.ids and list(req.columns.payloads_json) == [b"{}"]
    assert (req.shared.tenant_id, req.shared.app_id, req.shared.task_type, req.shared.queue) == (
        "ten", "app", "send", "default")
    assert req.shared.retry == RETRY


def test_what_a_task_sets_of_its_own_goes_on_the_task_and_what_all_share_in_shared():
    d = duration_pb2.Duration(seconds=5)
    items = [valid(key="k1", delay=d), valid(key="k2", queue="q2"), valid(task_id=new_task_id())]
    t = enqueue.of_valid(P, items)
    assert set(t.columns) == {"queue", "idempotency_key", "fingerprint", "delay"}
    req = enqueue.request(3, t, [0, 2])
    assert not req.HasField("columns") and req.shard_id == 3
    assert req.shared.task_type == "send" and not req.shared.queue and req.shared.retry == RETRY
    a, c = req.tasks
    assert (a.task_id, a.idempotency_key, a.fingerprint, a.queue, a.delay.seconds) == (
        t.ids[0], "k1", "f", "default", 5)
    assert (c.task_id, c.idempotency_key, c.HasField("delay")) == (t.ids[2], "", False)
    # A single keyed enqueue: its key and fingerprint travel on the task, the rest shared.
    one = enqueue.request(1, enqueue.of_valid(P, [valid(key="k")], where=""), None)
    assert not one.HasField("columns") and one.tasks[0].idempotency_key == "k" and one.shared.task_type == "send"
    assert not one.shared.idempotency_key


def test_a_schedules_task_carries_its_schedule():
    when = timestamp_pb2.Timestamp(seconds=1_800_000_000)
    t = enqueue.scheduled(enqueue.of_valid(P, [valid(key="sched:s@x")], where="task."), "s", when)
    (task,) = enqueue.request(1, t, None).tasks
    assert (task.schedule_id, task.scheduled_time, task.idempotency_key) == ("s", when, "sched:s@x")


def test_a_plain_batch_is_two_columns_and_the_handlers_policy():
    ids = [new_task_id() for _ in range(3)]
    plain = PlainBatch(task_type="send", queue="default", handler=register(apps_pb2.Handler(name="send")), task_ids=ids,
                       payloads=[b"1", b"2", b"null"], sizes=[1, 1, 0])
    t = enqueue.of_plain(P, plain)
    assert not t.columns and t.ids is ids
    req = enqueue.request(2, t, [1])
    assert list(req.columns.task_ids) == [ids[1]] and list(req.columns.payloads_json) == [b"2"]
    assert req.shared.retry.max_attempts == 5  # the defaults resolved


def test_merged_singles_share_what_they_all_have_and_keep_the_rest_per_task():
    a = enqueue.of_valid(P, [valid()], where="")
    b = enqueue.of_valid(P, [valid(queue="q2")], where="")
    c = enqueue.of_valid(Principal("ten2", "app", ""), [valid(key="k")], where="")
    plain = enqueue.merge([a, enqueue.of_valid(P, [valid()], where="")])
    assert not plain.columns and enqueue.request(1, plain, None).HasField("columns")
    m = enqueue.merge([a, b, c])
    assert m.ids == a.ids + b.ids + c.ids and set(m.columns) == {"tenant_id", "queue", "idempotency_key",
                                                                   "fingerprint"}
    req = enqueue.request(1, m, None)
    assert [t.tenant_id for t in req.tasks] == ["ten", "ten", "ten2"] and not req.shared.tenant_id
    assert [t.queue for t in req.tasks] == ["default", "q2", "default"]
    assert [t.idempotency_key for t in req.tasks] == ["", "", "k"]


def test_route_groups_by_shard_in_call_order_and_cuts_big_parts(monkeypatch):
    slots = {}
    for slot in range(0, 65536, 97):
        slots.setdefault(MAP.shard_for_slot(slot), slot)
    order = [1, 2, 1, 2, 2]
    t = enqueue.of_valid(P, [valid(task_id=new_task_id(slots[s])) for s in order])
    assert enqueue.route(t, MAP) == [(1, [0, 2]), (2, [1, 3, 4])]
    same = enqueue.of_valid(P, [valid(task_id=new_task_id(slots[1])) for _ in range(3)])
    assert enqueue.route(same, MAP) == [(1, None)]
    monkeypatch.setattr(enqueue, "CREATE_CHUNK_BYTES", 2 * enqueue.TASK_OVERHEAD_BYTES + 10)
    assert enqueue.route(same, MAP) == [(1, [0, 1]), (1, [2])]


class FakeHistory:
    """History's CreateTasks semantics: a key owned by another fingerprint is a conflict and
    rolls the whole request back; a key with the same fingerprint is deduplicated."""

    def __init__(self, delay: float = 0.01):
        self.delay = delay
        self.calls: list[list[str]] = []
        self.keys: dict[str, tuple[str, str]] = {}  # key -> (task_id, fingerprint)
        self.created: set[str] = set()
        self.fail: dict[int, errors.ServiceError] = {}  # call number -> its error

    async def create(self, req, timeout):
        if req.HasField("columns"):
            tasks = [history_pb2.NewTask(task_id=i) for i in req.columns.task_ids]
        else:
            tasks = list(req.tasks)
        self.calls.append([t.task_id for t in tasks])
        n = len(self.calls)
        await asyncio.sleep(self.delay)
        if n in self.fail:
            raise self.fail[n]
        out, claimed, conflict = [], {}, False
        for t in tasks:
            owner = self.keys.get(t.idempotency_key) if t.idempotency_key else None
            if owner is None:
                if t.idempotency_key:
                    claimed[t.idempotency_key] = (t.task_id, t.fingerprint)
                out.append(history_pb2.CreateResult(task_id=t.task_id))
            elif owner[1] == t.fingerprint:
                out.append(history_pb2.CreateResult(task_id=owner[0], deduplicated=True))
            else:
                out.append(history_pb2.CreateResult(task_id=owner[0], conflict=True))
                conflict = True
        if not conflict:
            self.keys.update(claimed)
            self.created.update(r.task_id for r in out if not r.deduplicated)
        if req.HasField("columns"):
            return None
        return out


def single(key: str = "", fp: str = "f", task_id: str = "") -> enqueue.Tasks:
    return enqueue.of_valid(P, [valid(key=key, fp=fp, task_id=task_id)], where="")


async def test_alone_when_idle_then_coalesced_while_a_call_is_in_flight():
    h = FakeHistory()
    c = enqueue.Creates(h, ShardMap.even([1]))
    t0 = single()
    assert (await c.create(t0, 5)).ids == t0.ids and len(h.calls) == 1
    many = [single() for _ in range(20)]
    results = await asyncio.gather(*(c.create(t, 5) for t in many))
    assert [r.ids for r in results] == [t.ids for t in many]
    assert len(h.calls) == 3 and len(h.calls[1]) == 1 and len(h.calls[2]) == 19 and c.calls == 3


async def test_a_conflict_answers_its_caller_and_the_rest_go_again_alone():
    h = FakeHistory()
    c = enqueue.Creates(h, ShardMap.even([1]))
    orig = single("k", "one")
    await c.create(orig, 5)
    first = asyncio.ensure_future(c.create(single(), 5))
    await asyncio.sleep(0)
    clash, fresh, same = (single("k", "two"), single("new"), single("k", "one"))
    waits = [asyncio.ensure_future(c.create(t, 5)) for t in (clash, fresh, same)]
    await first
    r_clash, r_fresh, r_same = await asyncio.gather(*waits, return_exceptions=True)
    assert isinstance(r_clash, errors.AlreadyExists) and r_clash.fields["original_task_id"] == orig.ids[0]
    assert "idempotency_key 'k' was already used" in r_clash.message
    assert (r_fresh.ids, r_fresh.deduplicated) == (fresh.ids, [False])
    assert (r_same.ids, r_same.deduplicated) == (orig.ids, [True])
    assert fresh.ids[0] in h.created and h.keys["new"] == (fresh.ids[0], "f")


async def test_one_key_or_one_id_never_shares_a_call():
    h = FakeHistory()
    c = enqueue.Creates(h, ShardMap.even([1]))
    first = asyncio.ensure_future(c.create(single(), 5))
    await asyncio.sleep(0)
    dup = [asyncio.ensure_future(c.create(single("same"), 5)) for _ in range(3)]
    tid = new_task_id()
    twice = [asyncio.ensure_future(c.create(single(task_id=tid), 5)) for _ in range(2)]
    await first
    results = await asyncio.gather(*dup)
    assert len({r.ids[0] for r in results}) == 1 and sum(r.deduplicated[0] for r in results) == 2
    await asyncio.gather(*twice)
    assert all(call.count(tid) <= 1 for call in h.calls)
    keyed = {r.ids[0] for r in results}
    assert all(sum(t in keyed for t in call) <= 1 for call in h.calls)


@pytest.mark.parametrize("error, each_alone", [(errors.Unavailable("shard 1 is unavailable"), False),
                                               (errors.DeadlineExceeded("no answer"), False),
                                               (errors.InvalidArgument("tasks[1]: bad"), True)])
async def test_a_failed_shared_call_fails_everyone_or_goes_again_alone(error, each_alone):
    h = FakeHistory()
    c = enqueue.Creates(h, ShardMap.even([1]))
    h.fail[2] = error  # the shared call
    first = asyncio.ensure_future(c.create(single(), 5))
    await asyncio.sleep(0)
    ts = [single(), single()]
    waiting = [asyncio.ensure_future(c.create(t, 5)) for t in ts]
    await first
    outcomes = await asyncio.gather(*waiting, return_exceptions=True)
    if each_alone:
        assert [o.ids for o in outcomes] == [t.ids for t in ts] and h.calls[2:] == [ts[0].ids, ts[1].ids]
    else:
        assert all(o is error for o in outcomes) and len(h.calls) == 2


async def test_a_caller_that_gave_up_is_not_sent():
    h = FakeHistory(delay=0.05)
    c = enqueue.Creates(h, ShardMap.even([1]))
    first = asyncio.ensure_future(c.create(single(), 5))
    await asyncio.sleep(0)
    gone, kept = single(), single()
    g = asyncio.ensure_future(c.create(gone, 5))
    k = asyncio.ensure_future(c.create(kept, 5))
    await asyncio.sleep(0.01)
    g.cancel()
    await first
    assert (await k).ids == kept.ids
    assert all(gone.ids[0] not in call for call in h.calls)


async def test_a_batch_part_goes_at_once_and_a_conflict_names_its_item():
    h = FakeHistory(delay=0.05)
    c = enqueue.Creates(h, ShardMap.even([1]))
    await c.create(single("k", "one"), 5)
    first = asyncio.ensure_future(c.create(single(), 5))
    await asyncio.sleep(0)
    batch = enqueue.of_valid(P, [valid(key="a"), valid(key="k", fp="two"), valid(key="c")])
    b = asyncio.ensure_future(c.create(batch, 5))
    await asyncio.sleep(0.01)
    assert len(h.calls) == 3 and not first.done()  # (not held behind the single in flight)
    with pytest.raises(errors.AlreadyExists) as e:
        await b
    assert e.value.message.startswith("tasks[1].idempotency_key 'k' was already used")
    await first


async def test_a_fan_out_child_never_shares_a_call_with_other_single_enqueues():
    """History tells a request of children by its first and last task: a child coalesced into
    the middle of other single enqueues would lose its parent link."""
    from ratchet.libs.shardmap import child_id
    from ratchet.services.gateway import children

    h = FakeHistory()
    c = enqueue.Creates(h, ShardMap.even([1]))
    first = asyncio.ensure_future(c.create(single(), 5))  # in flight: what follows coalesces
    await asyncio.sleep(0)
    parent = new_task_id()
    handlers = {"send": register(apps_pb2.Handler(name="send"))}
    child = children.form(P, parent, 0, [child_id(parent, 0, 0, False)], ["send"], [b"1"], [1], handlers)
    others = [single() for _ in range(3)]
    waits = [asyncio.ensure_future(c.create(t, 5)) for t in (others[0], child, others[1], others[2])]
    await first
    await asyncio.gather(*waits)
    [call] = [ids for ids in h.calls if child.ids[0] in ids]
    assert call == child.ids
    assert [o.ids[0] for o in others] == [i for ids in h.calls[1:] for i in ids if i != child.ids[0]]
