"""The SDK mints one task id per logical enqueue without a key (or sends the
caller's key) and reuses it on its own transport retries (design follow-up
Q1), so a lost ack never makes a twin."""

from __future__ import annotations

import grpc
import pytest

from ratchet.client import Client, DeadlineExceeded, InvalidArgument, RatchetError, Unavailable
from ratchet.libs.shardmap import parse_task_id, slot_of
from tests.unit.client.fake_server import FakeServer

U, D = grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    # The unary transport's retries (stream=False); the enqueue stream's are AsyncClient's
    # (tests/integration/gateway); a server without the stream is tested below.
    c = Client(server.endpoint, "rk_test", timeout=5.0, stream=False)
    c._t.sleep = lambda seconds: None  # backoff is tested separately; keep the test instant
    yield c
    c.close()


def test_retries_reuse_the_minted_task_id(server, client):
    server.tasks.fail_with = [U, D, U]
    task_id = client.enqueue("greet", {"name": "Ada"})
    ids = [r.task_id for r in server.tasks.requests]
    assert len(ids) == 4 and len(set(ids)) == 1 and parse_task_id(ids[0]) == ids[0]
    assert all(not r.idempotency_key for r in server.tasks.requests)  # no key row for a plain enqueue
    assert task_id == ids[0]


def test_each_logical_call_gets_its_own_task_id(server, client):
    client.enqueue("greet")
    client.enqueue("greet")
    a, b = (r.task_id for r in server.tasks.requests)
    assert a != b


def test_explicit_key_is_sent_unchanged(server, client):
    server.tasks.fail_with = [U]
    client.enqueue("greet", idempotency_key="order-42")
    assert [r.idempotency_key for r in server.tasks.requests] == ["order-42", "order-42"]
    assert [r.task_id for r in server.tasks.requests] == ["", ""]  # the key alone identifies the call


def test_retries_are_bounded(server, client):
    server.tasks.fail_with = [U] * 10
    with pytest.raises(Unavailable, match="injected UNAVAILABLE"):
        client.enqueue("greet")
    assert len(server.tasks.requests) == 5  # first try + max_retries (4)


def test_deadline_exceeded_surfaces_as_ambiguous(server, client):
    server.tasks.fail_with = [D] * 10
    with pytest.raises(DeadlineExceeded):
        client.enqueue("greet")


def test_invalid_argument_is_not_retried(server, client):
    server.tasks.fail_with = [grpc.StatusCode.INVALID_ARGUMENT]
    with pytest.raises(InvalidArgument, match="injected INVALID_ARGUMENT"):
        client.enqueue("greet")
    assert len(server.tasks.requests) == 1


def test_batch_items_get_ids_that_survive_retries(server, client):
    server.tasks.fail_with = [U]
    ids = client.enqueue_batch([{"task_type": "greet"}, {"task_type": "add", "idempotency_key": "mine"}])
    first, second = server.tasks.requests
    assert list(first.tasks) == list(second.tasks)  # resent unchanged
    assert first.tasks[1].idempotency_key == "mine" and not first.tasks[1].task_id
    assert parse_task_id(first.tasks[0].task_id) and not first.tasks[0].idempotency_key
    assert ids == [first.tasks[0].task_id, "task-for-mine"]


def test_the_ids_minted_for_one_batch_share_a_slot_per_hundred_and_batches_spread(server, client):
    """One slot per run of 100 minted ids: a call of 100 is one shard's work; over calls (and in
    a bigger call) the slots spread."""
    for _ in range(20):
        client.enqueue_batch([{"task_type": "greet"}] * 5 + [{"task_type": "add", "idempotency_key": "k"}])
    per_call = [{slot_of(t.task_id) for t in r.tasks if t.task_id} for r in server.tasks.requests]
    assert all(len(slots) == 1 for slots in per_call)
    assert len(set().union(*per_call)) > 10
    client.enqueue_batch([{"task_type": "greet"}] * 250)
    slots = [slot_of(t) for t in server.tasks.requests[-1].columns.task_ids]  # (one type: columns)
    runs = [set(slots[:100]), set(slots[100:200]), set(slots[200:])]
    assert [len(r) for r in runs] == [1, 1, 1] and len(set().union(*runs)) >= 2  # random slots


def test_api_key_travels_as_bearer(server, client):
    client.enqueue("greet")
    assert server.tasks.metadata[0]["authorization"] == "Bearer rk_test"


def test_backoff_grows_and_is_capped(server, client):
    slept = []
    client._t.sleep = slept.append
    server.tasks.fail_with = [U] * 4
    client.enqueue("greet")
    assert len(slept) == 4
    assert all(0 < s <= 2.0 for s in slept) and slept[-1] > slept[0] / 2


def test_a_server_without_the_enqueue_stream_is_told_apart_and_nothing_is_sent(server):
    """This fake serves no EnqueueTaskStream: the default client says so (UNIMPLEMENTED, and
    how to send unary calls instead) and sends nothing; stream=False works against it."""
    with Client(server.endpoint, "rk_test", timeout=5.0) as c:
        with pytest.raises(RatchetError) as e:
            c.enqueue("greet")
        assert e.value.code == "UNIMPLEMENTED" and "stream=False" in str(e.value)
        assert c._stream.stream.stream_calls == 0
    assert server.tasks.requests == []
    server.tasks.fail_with = [U, U]
    with Client(server.endpoint, "rk_test", timeout=5.0, stream=False) as c:
        c._t.sleep = lambda seconds: None
        task_id = c.enqueue("greet")
    ids = [r.task_id for r in server.tasks.requests]
    assert len(ids) == 3 and set(ids) == {task_id}  # retried with one id
