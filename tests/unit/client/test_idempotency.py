"""The SDK mints one idempotency key per logical enqueue and reuses it on its
own transport retries (design follow-up Q1), so a lost ack never makes a twin."""

from __future__ import annotations

import grpc
import pytest

from ratchet.client import Client, DeadlineExceeded, InvalidArgument, Unavailable

from tests.unit.client.fake_server import FakeServer

U, D = grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    c = Client(server.endpoint, "rk_test", timeout=5.0)
    c._t.sleep = lambda seconds: None  # backoff is tested separately; keep the test instant
    yield c
    c.close()


def test_retries_reuse_the_auto_key(server, client):
    server.tasks.fail_with = [U, D, U]
    task_id = client.enqueue("greet", {"name": "Ada"})
    keys = [r.idempotency_key for r in server.tasks.requests]
    assert len(keys) == 4 and len(set(keys)) == 1 and keys[0].startswith("sdk-")
    assert task_id == f"task-for-{keys[0]}"


def test_each_logical_call_gets_its_own_key(server, client):
    client.enqueue("greet")
    client.enqueue("greet")
    a, b = (r.idempotency_key for r in server.tasks.requests)
    assert a != b


def test_explicit_key_is_sent_unchanged(server, client):
    server.tasks.fail_with = [U]
    client.enqueue("greet", idempotency_key="order-42")
    assert [r.idempotency_key for r in server.tasks.requests] == ["order-42", "order-42"]


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


def test_batch_items_get_keys_that_survive_retries(server, client):
    server.tasks.fail_with = [U]
    ids = client.enqueue_batch([{"task_type": "greet"}, {"task_type": "add", "idempotency_key": "mine"}])
    first, second = server.tasks.requests
    assert [t.idempotency_key for t in first.tasks] == [t.idempotency_key for t in second.tasks]
    assert first.tasks[1].idempotency_key == "mine" and first.tasks[0].idempotency_key.startswith("sdk-")
    assert ids == [f"task-for-{t.idempotency_key}" for t in first.tasks]


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
