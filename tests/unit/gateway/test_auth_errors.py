"""Key handling and the error mapping, without I/O."""

from __future__ import annotations

import logging

import grpc
import pytest

from ratchet.libs.rpc import errors
from ratchet.services.gateway import handlers, server
from ratchet.services.gateway.auth import Authenticator, Principal, bearer, key_hash, new_api_key, require_app
from ratchet.services.gateway.store import KeyOwner


class FakeStore:
    def __init__(self):
        self.keys: dict[str, KeyOwner] = {}
        self.lookups = 0

    async def api_key_get_by_hash(self, h):
        self.lookups += 1
        return self.keys.get(h)


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_key_format():
    k = new_api_key()
    assert k.startswith("rk_") and len(k) == 35 and k != new_api_key()


@pytest.mark.parametrize("md, needle", [({}, "missing credentials"), ({"authorization": "Basic x"}, "malformed"),
                                        ({"authorization": "Bearer "}, "malformed")])
def test_bearer_errors(md, needle):
    with pytest.raises(errors.Unauthenticated, match=needle):
        bearer(md)


async def test_verified_keys_are_cached_for_the_ttl_and_unknown_keys_are_not():
    store, clock = FakeStore(), Clock()
    auth = Authenticator(store, key_hash("admin"), [key_hash("host")], cache_s=10, monotonic=clock)
    md = {"authorization": "Bearer rk_good"}
    with pytest.raises(errors.Unauthenticated):
        await auth.app(md)
    store.keys[key_hash("rk_good")] = KeyOwner("k1", "t1", "a1", "default")
    assert await auth.app(md) == Principal("t1", "a1", "default")  # no negative caching
    lookups = store.lookups
    del store.keys[key_hash("rk_good")]  # revoked
    clock.now = 9.9
    assert (await auth.app(md)).tenant_id == "t1" and store.lookups == lookups
    clock.now = 10.1
    with pytest.raises(errors.Unauthenticated):
        await auth.app(md)


def test_admin_and_host_checks():
    auth = Authenticator(FakeStore(), key_hash("admin"), [key_hash("h1"), key_hash("h2")], cache_s=1)
    auth.admin({"authorization": "Bearer admin"})
    auth.host({"authorization": "Bearer h2"})
    with pytest.raises(errors.Unauthenticated):
        auth.admin({"authorization": "Bearer h1"})
    with pytest.raises(errors.Unauthenticated):
        auth.host({"authorization": "Bearer admin"})


def test_require_app_names_the_keys_app():
    with pytest.raises(errors.PermissionDenied, match="belongs to app 'default'"):
        require_app(Principal("t", "a", "default"), "billing")


def test_error_mapping_is_one_table_plus_explicit_statuses():
    conflict = errors.AlreadyExists("taken", original_task_id="abc")
    assert conflict.http_status == 409
    assert conflict.to_json() == {"error": {"code": "ALREADY_EXISTS", "http_status": 409, "message": "taken",
                                            "original_task_id": "abc"}}
    assert conflict.trailing_metadata() == (("ratchet-original-task-id", "abc"),)
    assert errors.TooLarge("big").http_status == 413
    assert errors.Unavailable("down").http_status == 503
    assert errors.from_code(grpc.StatusCode.FAILED_PRECONDITION, "x").code == grpc.StatusCode.FAILED_PRECONDITION
    assert errors.from_code(grpc.StatusCode.NOT_FOUND, "x").__class__ is errors.NotFound


async def test_whatever_a_handler_raises_leaves_it_as_a_service_error(caplog):
    async def refuses(req, call):
        raise errors.NotFound("task t not found")

    async def times_out(req, call):
        raise TimeoutError

    async def breaks(req, call):
        raise KeyError("secret detail")

    call = handlers.Call({}, 1.0)
    with pytest.raises(errors.NotFound, match="task t not found"):
        await handlers.invoke(refuses, None, call)
    with pytest.raises(errors.DeadlineExceeded):
        await handlers.invoke(times_out, None, call)
    with caplog.at_level(logging.ERROR), pytest.raises(errors.Internal) as e:
        await handlers.invoke(breaks, None, call)
    assert "KeyError" in e.value.message and "secret detail" not in e.value.message
    assert "secret detail" in caplog.text  # the traceback is logged, not answered


def test_a_call_streams_own_timeout_says_the_call_may_have_taken_effect():
    err = server._error_of(TimeoutError(), "EnqueueTask")
    assert err.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "may or may not have taken effect" in err.message and "idempotency_key" in err.message
    refusal = errors.InvalidArgument("a call sets x and y")
    assert server._error_of(refusal, "EnqueueTask") is refusal
    assert server._error_of(KeyError("k"), "EnqueueTask").code == grpc.StatusCode.INTERNAL
