"""The deploy preflight through the gateway (gRPC and REST) against the fake history's four
shards: a deployment that drops handlers live tasks or runs still use is refused naming each
and its count, unless allow_dropping_live_handlers; one that keeps or adds handlers, or
re-deploys the active digest, costs no CountTasks; a shard that does not answer fails the
deploy UNAVAILABLE and nothing is stored or activated."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import pathlib
import time
import uuid

import grpc
import pytest

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.libs.shardmap import ShardMap

from .conftest import HOST_TOKEN, SHARDS, b64, make_bundle

pytestmark = pytest.mark.timeout(60)
S = tasks_pb2
T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
HOST_MD = (("authorization", f"Bearer {HOST_TOKEN}"),)
V1 = {"app.py": b"# v1: send, resize, onboard\n"}


def v2() -> dict[str, bytes]:
    """Another bundle, its own in each test (a bundle's blob is shared by every app that deploys it)."""
    return {"app.py": f"# v2 {uuid.uuid4().hex}\n".encode()}
FIRST = [apps_pb2.Handler(name="send"), apps_pb2.Handler(name="resize"),
         apps_pb2.Handler(name="onboard", kind=apps_pb2.HANDLER_KIND_WORKFLOW)]


async def tenant(env):
    """A fresh tenant whose app's active deployment registers send, resize and onboard."""
    t = await env.new_tenant(f"preflight-{uuid.uuid4().hex[:10]}")
    assert (await env.deploy(t.api_key, handlers=FIRST, files=V1)).deployment.created
    return t


def live(env, t, task_type: str, *states: int) -> list[str]:
    return [env.history.add(t.tenant_id, t.app_id, task_type, s, created=T0) for s in states]


async def active_digest(env, t) -> str:
    got = await control_pb2_grpc.ControlServiceStub(env.channel).GetActiveDeployment(
        control_pb2.GetActiveDeploymentRequest(app_id=t.app_id), metadata=HOST_MD, timeout=5)
    return got.deployment.digest


def counts_since(env, before: int) -> list:
    return [c for n, c in env.history.calls[before:] if n == "CountTasks"]


def stored(env, files: dict) -> bool:
    digest = make_bundle(files)[1].removeprefix("sha256:")
    return any(pathlib.Path(env.blob_dir).rglob(f"{digest}*"))


async def test_dropping_handlers_with_live_tasks_is_refused_naming_each_and_its_count(env):
    t, V2 = await tenant(env), v2()
    ids = live(env, t, "resize", *[S.TASK_STATE_ENQUEUED] * 6, S.TASK_STATE_LEASED, S.TASK_STATE_RETRY_WAIT)
    live(env, t, "onboard", S.TASK_STATE_WAITING)
    live(env, t, "resize", S.TASK_STATE_FAILED, S.TASK_STATE_SUCCEEDED, S.TASK_STATE_CANCELED)  # (not live)
    live(env, t, "send", S.TASK_STATE_ENQUEUED)  # (kept: not counted)
    env.history.add("another-tenant", t.app_id, "resize", S.TASK_STATE_ENQUEUED, created=T0)
    assert len({ShardMap.even(SHARDS).shard_for_task(i) for i in ids}) > 1  # (the counts span shards)
    first = await active_digest(env, t)
    before = len(env.history.calls)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await env.deploy(t.api_key, handlers=[apps_pb2.Handler(name="send")], files=V2)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    msg = e.value.details()
    assert "'onboard' (1 live), 'resize' (8 live)" in msg, msg
    assert "UnknownTaskType" in msg and "ratchet deploy --allow-dropping-live-handlers" in msg
    assert "'send'" not in msg
    sent = counts_since(env, before)
    assert sorted((c.shard_id, c.filter.task_type) for c in sent) == sorted(
        (s, ty) for s in SHARDS for ty in ("onboard", "resize"))
    assert all(list(c.filter.states) == [S.TASK_STATE_ENQUEUED, S.TASK_STATE_LEASED, S.TASK_STATE_RETRY_WAIT,
                                         S.TASK_STATE_WAITING] and c.app_id == t.app_id for c in sent)
    # Nothing was stored or activated: the first deployment is active and its types still enqueue.
    assert await active_digest(env, t) == first and not stored(env, V2)
    r = await env.http.post("/v1/tasks", json={"task_type": "resize"}, headers=env.auth(t.api_key))
    assert r.status_code == 200, r.text


async def test_the_refusal_over_rest_is_400_with_the_counts(env):
    t, V2 = await tenant(env), v2()
    live(env, t, "resize", S.TASK_STATE_LEASED, S.TASK_STATE_ENQUEUED)
    bundle, digest = make_bundle(V2)
    r = await env.http.post("/v1/apps/default/deployments", headers=env.auth(t.api_key),
                            json={"bundle": b64(bundle), "digest": digest, "handlers": [{"name": "send"}]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "FAILED_PRECONDITION" and "'resize' (2 live)" in err["message"]
    assert err["dropped_live_handlers"] == "resize=2"
    r = await env.http.post("/v1/apps/default/deployments", headers=env.auth(t.api_key),
                            json={"bundle": b64(bundle), "digest": digest, "handlers": [{"name": "send"}],
                                  "allow_dropping_live_handlers": True})
    assert r.status_code == 200 and r.json()["deployment"]["digest"] == digest, r.text


async def test_the_flag_deploys_without_counting_and_the_dropped_type_is_gone(env):
    t, V2 = await tenant(env), v2()
    live(env, t, "resize", S.TASK_STATE_ENQUEUED)
    before = len(env.history.calls)
    dep = (await env.apps.CreateDeployment(apps_pb2.CreateDeploymentRequest(
        app="default", bundle=make_bundle(V2)[0], digest=make_bundle(V2)[1], handlers=[apps_pb2.Handler(name="send")],
        allow_dropping_live_handlers=True), metadata=env.md(t.api_key), timeout=10)).deployment
    assert dep.created and await active_digest(env, t) == dep.digest
    assert counts_since(env, before) == []
    r = await env.http.post("/v1/tasks", json={"task_type": "resize"}, headers=env.auth(t.api_key))
    assert r.status_code == 400 and "registered types: send" in r.json()["error"]["message"]


async def test_keeping_or_adding_handlers_or_redeploying_the_active_digest_costs_no_count(env):
    t, V2 = await tenant(env), v2()
    live(env, t, "resize", S.TASK_STATE_ENQUEUED)
    before = len(env.history.calls)
    more = [*FIRST, apps_pb2.Handler(name="report")]
    assert (await env.deploy(t.api_key, handlers=more, files=V2)).deployment.created
    again = (await env.deploy(t.api_key, handlers=more, files=V2)).deployment
    assert not again.created and await active_digest(env, t) == again.digest
    assert counts_since(env, before) == []


async def test_dropping_handlers_nothing_live_uses_deploys_after_counting(env):
    t, V2 = await tenant(env), v2()
    live(env, t, "resize", S.TASK_STATE_FAILED, S.TASK_STATE_SUCCEEDED)
    before = len(env.history.calls)
    dep = (await env.deploy(t.api_key, handlers=[apps_pb2.Handler(name="send")], files=V2)).deployment
    assert dep.created and await active_digest(env, t) == dep.digest
    assert len(counts_since(env, before)) == 2 * len(SHARDS)


@pytest.mark.parametrize("how", ["down", "silent"])
async def test_a_shard_that_does_not_answer_fails_the_deploy_unavailable_and_nothing_changes(env, how):
    t, V2 = await tenant(env), v2()
    first = await active_digest(env, t)
    getattr(env.history, how).add(2)
    try:
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await env.deploy(t.api_key, handlers=[apps_pb2.Handler(name="send")], files=V2)
        took = time.monotonic() - started
    finally:
        getattr(env.history, how).discard(2)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value.details()
    msg = e.value.details()
    assert "deploy preflight" in msg and "shard 2 did not answer" in msg and "Nothing was deployed" in msg
    assert took < 5.0  # (half the request's deadline at most: the answer arrives before the client gives up)
    assert await active_digest(env, t) == first and not stored(env, V2)


async def test_ratchet_deploy_prints_the_refusal_and_the_flag_deploys(env, tmp_path, monkeypatch, capsys):
    """The CLI against this gateway: the app folder now declares only `send`, while two `resize`
    tasks are live; `ratchet deploy` exits 1 with the refusal, the flag deploys it."""
    from ratchet.cli.main import main
    t = await tenant(env)
    live(env, t, "resize", S.TASK_STATE_ENQUEUED, S.TASK_STATE_RETRY_WAIT)
    app = tmp_path / "app"
    app.mkdir()
    (app / "app.py").write_text(f"# {uuid.uuid4().hex}\nfrom ratchet import task\n\n\n"
                                f"@task\ndef send(ctx, payload):\n    return payload\n")
    monkeypatch.setenv("RATCHET_ENDPOINT", f"127.0.0.1:{env.gateway.grpc_port}")
    monkeypatch.setenv("RATCHET_API_KEY", t.api_key)
    monkeypatch.chdir(tmp_path)
    first = await active_digest(env, t)
    code = await asyncio.to_thread(main, ["deploy", str(app)])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and err.startswith("error: FAILED_PRECONDITION: "), err
    assert "'resize' (2 live)" in err and "onboard" not in err and "--allow-dropping-live-handlers" in err
    assert await active_digest(env, t) == first
    code = await asyncio.to_thread(main, ["deploy", str(app), "--allow-dropping-live-handlers"])
    out, err = capsys.readouterr()
    assert code == 0, err
    dep = json.loads(out)
    assert dep["created"] is True and [h["name"] for h in dep["handlers"]] == ["send"]
    assert await active_digest(env, t) == dep["digest"] != first
