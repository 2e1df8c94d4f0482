"""The deployment cache's handlers carry the policy an enqueue without overrides takes,
resolved once per deployment: enqueues share it, a new deployment brings its own."""

from __future__ import annotations

import datetime as dt

import pytest
from google.protobuf import json_format

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.libs.rpc.errors import InvalidArgument
from ratchet.libs.shardmap import new_task_id
from ratchet.services.gateway import enqueue, validation
from ratchet.services.gateway.auth import Principal
from ratchet.services.gateway.deployments import HANDLER_CACHE_S, Deployments, register
from ratchet.services.gateway.store import DeploymentRow

P = Principal("ten", "app", "")
NOW = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Store:
    """The control store's active deployment of one app; `deploy` is another replica's deploy."""

    def __init__(self) -> None:
        self.row: DeploymentRow | None = None
        self.reads = 0

    def deploy(self, deployment_id: int, *handlers: apps_pb2.Handler) -> None:
        self.row = DeploymentRow(
            deployment_id=deployment_id, app_id="app", digest=f"sha256:{deployment_id:064x}", module="app",
            handlers=[json_format.MessageToDict(h, preserving_proto_field_name=True) for h in handlers],
            bundle_uri="file:///dev/null", created_at=dt.datetime(2030, 1, 1, tzinfo=dt.UTC), tenant_id="ten")

    async def active_deployment_get(self, app_id: str) -> DeploymentRow | None:
        self.reads += 1
        return self.row


def handler(max_attempts: int, name: str = "send") -> apps_pb2.Handler:
    return apps_pb2.Handler(name=name, retry=tasks_pb2.RetryPolicy(max_attempts=max_attempts))


def enqueued(handlers, **fields) -> tuple[validation.ValidTask, tasks_pb2.RetryPolicy]:
    """One enqueue of `send` validated and encoded: the task and the policy history would get."""
    req = json_format.ParseDict({"task_type": "send", **fields}, tasks_pb2.EnqueueTaskRequest())
    t = validation.validate_task(req, handlers, max_payload_bytes=1024, now_s=NOW)
    return t, enqueue.request(1, enqueue.of_valid(P, [t], where=""), None).shared.retry


def batch(handlers) -> tasks_pb2.RetryPolicy:
    """A plain batch of `send` encoded: the policy history would get."""
    req = tasks_pb2.EnqueueTasksRequest(tasks=[tasks_pb2.EnqueueTaskRequest(
        task_type="send", task_id=new_task_id(), payload_json="{}") for _ in range(3)])
    plain = validation.plain_batch(req, handlers, max_payload_bytes=1024)
    assert plain is not None
    return enqueue.request(1, enqueue.of_plain(P, plain), None).shared.retry


async def test_enqueues_without_overrides_share_the_handlers_policy_resolved_once():
    store, clock = Store(), Clock()
    store.deploy(1, handler(3))
    deployments = Deployments(store, None, 0, monotonic=clock)  # type: ignore[arg-type]  # (no bundles here)
    handlers = await deployments.handlers_for("app")
    assert handlers is not None
    a, retry_a = enqueued(handlers)
    b, retry_b = enqueued(await deployments.handlers_for("app"))
    assert store.reads == 1 and a.retry is b.retry and a.timeouts is b.timeouts and a.wire is b.wire is not None
    assert retry_a.max_attempts == retry_b.max_attempts == 3 and batch(handlers).max_attempts == 3
    # A refresh that finds the same deployment keeps its handlers, policies and all.
    clock.now += HANDLER_CACHE_S + 0.1
    assert await deployments.handlers_for("app") is handlers and store.reads == 2
    # An override is merged on each enqueue, from the handler's policy, and never shared.
    o1, wire_o1 = enqueued(handlers, retry={"factor": 3})
    o2, _ = enqueued(handlers, retry={"factor": 4})
    assert o1.wire is None and o1.retry is not a.retry and (wire_o1.max_attempts, wire_o1.factor) == (3, 3.0)
    assert o2.retry.factor == 4.0 and enqueued(handlers)[1].factor == 2.0


async def test_a_new_deployment_brings_its_handlers_new_policy_not_the_cached_one():
    store, clock = Store(), Clock()
    store.deploy(1, handler(3))
    deployments = Deployments(store, None, 0, monotonic=clock)  # type: ignore[arg-type]  # (no bundles here)
    old = await deployments.handlers_for("app")
    assert enqueued(old)[1].max_attempts == 3
    # Another gateway deploys the same handler name with another default policy: this one serves
    # the old deployment within HANDLER_CACHE_S and the new one's policy after it.
    store.deploy(2, handler(8))
    assert await deployments.handlers_for("app") is old
    clock.now += HANDLER_CACHE_S + 0.1
    new = await deployments.handlers_for("app")
    assert new is not None and new["send"] is not old["send"]
    t, retry = enqueued(new)
    assert retry.max_attempts == 8 and t.retry.max_attempts == 8 and batch(new).max_attempts == 8
    # Rolled back to the first deployment: its policy again.
    store.deploy(1, handler(3))
    clock.now += HANDLER_CACHE_S + 0.1
    assert enqueued(await deployments.handlers_for("app"))[1].max_attempts == 3


def test_the_wire_form_encodes_what_the_fields_would():
    """A request built from a handler's prebuilt wire form equals one encoded field by field."""
    h = json_format.ParseDict({"name": "send", "non_retryable": ["KeyError"], "retry": {
        "max_attempts": 4, "rules": {"IOError": {"max_attempts": 9}}}, "timeouts": {"start_to_close": "30s"}},
        apps_pb2.Handler())
    handlers = {"send": register(h)}
    singles = [enqueued(handlers, queue=q)[0] for q in ("default", "q2", "default")]
    keyed = enqueued(handlers, idempotency_key="k")[0]
    forms = [enqueue.of_valid(P, [t], where="") for t in singles]
    forms += [enqueue.of_valid(Principal("ten2", "app", ""), [keyed], where=""), enqueue.of_valid(P, singles)]
    forms.append(enqueue.merge(forms[:4]))
    for f in forms:
        assert f.wire is handlers["send"].plain[2]
        encoded = enqueue.request(1, f, None)
        f.wire = None
        assert encoded == enqueue.request(1, f, None)
    assert list(encoded.shared.non_retryable) == ["KeyError"]
    assert encoded.shared.retry.rules["IOError"].max_attempts == 9
    # A form whose tasks differ in a policy field is encoded field by field.
    override = enqueued(handlers, retry={"max_attempts": 2})[0]
    mixed = enqueue.merge([enqueue.of_valid(P, [singles[0]], where=""), enqueue.of_valid(P, [override], where="")])
    assert mixed.wire is None and [t.retry.max_attempts for t in enqueue.request(1, mixed, None).tasks] == [4, 2]


def test_a_handler_whose_policy_is_inconsistent_is_refused_at_every_enqueue_naming_its_field():
    h = apps_pb2.Handler(name="send", retry=tasks_pb2.RetryPolicy(cap={"seconds": 1}, base={"seconds": 5}))
    handlers = {"send": register(h)}
    assert handlers["send"].plain is None
    for where in ("", "task."):
        with pytest.raises(InvalidArgument, match=rf"^{where}retry: cap"):
            validation.validate_task(tasks_pb2.EnqueueTaskRequest(task_type="send"), handlers, max_payload_bytes=1024,
                                     now_s=NOW, where=where)
    with pytest.raises(InvalidArgument, match="cap"):
        batch(handlers)
