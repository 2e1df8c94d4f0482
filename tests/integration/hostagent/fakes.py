"""In-memory DispatchService and ControlService on real grpc.aio servers,
for testing the host agent without the rest of the mesh."""

from __future__ import annotations

import asyncio
import hashlib
import io
import itertools
import tarfile
import textwrap
import uuid

import grpc
from google.protobuf import duration_pb2

from ratchet.api.apps.v1 import apps_pb2
from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.internal.worker.v1 import worker_pb2, worker_pb2_grpc

TOKEN = "host-token-5f0c2e"

SAMPLE_APP = '''
import os
import time

from ratchet import FatalError, RetryableError, RetryPolicy, task


@task
def echo(ctx, payload):
    return {"payload": payload, "attempt": ctx.attempt, "epoch": ctx.lease_epoch, "pid": os.getpid(),
            "task_id": ctx.task_id, "task_type": ctx.task_type, "max_attempts": ctx.max_attempts}


@task
def boom(ctx, payload):
    raise ValueError(f"kaput {payload}")


@task
def fatal(ctx, payload):
    raise FatalError("bad input, do not retry")


@task
def polite(ctx, payload):
    ctx.heartbeat()
    while not ctx.wait_cancelled(0.01):
        pass
    return "stopped"


@task
def sleepy(ctx, payload):
    time.sleep(payload)  # ignores cancel
    return "woke"


@task
def hog(ctx, payload):
    import re

    # The regex engine never releases the GIL: the stub's main thread is frozen too.
    return bool(re.match(r"(a|aa)+$", "a" * 200 + "b"))


@task
def env(ctx, payload):
    return {"env": dict(os.environ), "cwd": os.getcwd()}


@task
def later(ctx, payload):
    raise RetryableError("downstream busy", retry_after="30s")


@task(retries=RetryPolicy(rules={"ValueError": "fatal", "KeyError": RetryPolicy(max_attempts=9)}))
def picky(ctx, payload):
    raise (ValueError if payload == "value" else KeyError)(payload)


@task
def resume(ctx, payload):
    when = ctx.scheduled_time
    return {"last": ctx.last_checkpoint, "schedule_id": ctx.schedule_id,
            "scheduled_time": when.isoformat() if when else None, "tz": str(when.tzinfo) if when else None}


@task
def backfill(ctx, payload):
    """Counts from its cursor to payload["to"], checkpointing each step, pausing payload["pause"] s."""
    start = (ctx.last_checkpoint or {}).get("next", 0)
    for n in range(start, payload["to"]):
        ctx.checkpoint({"next": n + 1})
        if ctx.wait_cancelled(payload.get("pause", 0)):
            return "stopped"
    return {"started_at": start, "attempt": ctx.attempt}


@task
def resumable(ctx, payload):
    """Like backfill, but only the first attempt is slow (it is the one to kill)."""
    start = (ctx.last_checkpoint or {}).get("next", 0)
    for n in range(start, payload["to"]):
        ctx.checkpoint({"next": n + 1})
        if ctx.attempt == 1:
            time.sleep(payload["pause"])
    return {"started_at": start, "attempt": ctx.attempt}


@task
def ticker(ctx, payload):
    """Checkpoints every 10 ms for payload seconds."""
    deadline = time.monotonic() + payload
    n = 0
    while time.monotonic() < deadline:
        n += 1
        ctx.checkpoint(n)
        time.sleep(0.01)
    return n
'''


def make_bundle(files: dict[str, str]) -> tuple[bytes, str]:
    """(gzip tar, "sha256:<hex>") of an app folder given as {path: text}."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in sorted(files.items()):
            data = textwrap.dedent(text).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    bundle = buf.getvalue()
    return bundle, "sha256:" + hashlib.sha256(bundle).hexdigest()


def _authorized(context, log: list) -> bool:
    md = dict(context.invocation_metadata())
    ok = md.get("authorization") == f"Bearer {TOKEN}"
    if not ok:
        log.append(md.get("authorization"))
    return ok


class FakeDispatcher(worker_pb2_grpc.DispatchServiceServicer):
    """Hands out queued tasks, answers heartbeats as told, records completions."""

    def __init__(self):
        self.ready: asyncio.Queue[worker_pb2.LeasedTask] = asyncio.Queue()
        self.completions: list[worker_pb2.Completion] = []
        self.heartbeats: list[worker_pb2.HeartbeatRequest] = []
        self.actions: dict[str, worker_pb2.HeartbeatResult] = {}
        self.unauthorized: list = []
        self.changed = asyncio.Event()
        self.complete_failures = 0  # answer this many Complete calls UNAVAILABLE first
        self.complete_calls = 0
        self._epochs = itertools.count(1)

    def enqueue(self, task_type: str, payload: str = "null", app_id: str = "app-1", **fields) -> worker_pb2.LeasedTask:
        """Queue a lease; fields override the LeasedTask's (task_id, attempt, last_checkpoint_json...)."""
        values = dict(shard_id=1, task_id=str(uuid.uuid4()), tenant_id="tenant-1", app_id=app_id,
                      task_type=task_type, queue="default", payload_json=payload.encode(), attempt=1,
                      max_attempts=5, lease_epoch=next(self._epochs),
                      lease_duration=duration_pb2.Duration(seconds=30))
        task = worker_pb2.LeasedTask(**{**values, **fields})
        self.ready.put_nowait(task)
        return task

    def answer(self, task_id: str, action: int, kill_after_s: float | None = None, reason: str = "test") -> None:
        result = worker_pb2.HeartbeatResult(task_id=task_id, action=action, reason=reason)
        if kill_after_s is not None:
            result.kill_after.FromNanoseconds(int(kill_after_s * 1e9))
        self.actions[task_id] = result

    async def Poll(self, request, context):
        if not _authorized(context, self.unauthorized):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        wait = request.max_wait.ToTimedelta().total_seconds() or 20
        try:
            first = await asyncio.wait_for(self.ready.get(), wait)
        except TimeoutError:
            return
        batch = [first]
        while len(batch) < request.capacity and not self.ready.empty():
            batch.append(self.ready.get_nowait())
        yield worker_pb2.PollResponse(tasks=batch)

    async def Heartbeat(self, request, context):
        if not _authorized(context, self.unauthorized):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        self.heartbeats.append(request)
        self.changed.set()
        results = []
        for ref in request.leases:
            r = worker_pb2.HeartbeatResult(task_id=ref.task_id, action=worker_pb2.LEASE_ACTION_CONTINUE)
            r.MergeFrom(self.actions.get(ref.task_id, worker_pb2.HeartbeatResult()))
            r.lease_epoch = ref.lease_epoch
            results.append(r)
        return worker_pb2.HeartbeatResponse(results=results)

    async def Complete(self, request, context):
        if not _authorized(context, self.unauthorized):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        self.complete_calls += 1
        if self.complete_failures > 0:
            self.complete_failures -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "dispatcher restarting")
        self.completions.extend(request.completions)
        self.changed.set()
        return worker_pb2.CompleteResponse(results=[
            worker_pb2.CompletionResult(task_id=c.task_id, accepted=True) for c in request.completions])

    def checkpoints_sent(self, task_id: str) -> list[bytes]:
        """Every checkpoint the agent's heartbeats carried for task_id, oldest first."""
        return [ref.checkpoint_json for hb in self.heartbeats for ref in hb.leases
                if ref.task_id == task_id and ref.HasField("checkpoint_json")]

    async def completion_for(self, task_id: str, timeout: float = 15.0,
                             lease_epoch: int | None = None) -> worker_pb2.Completion:
        """Wait for the completion of task_id (of that lease epoch, if given)."""
        async def found():
            while True:
                for c in self.completions:
                    if c.task_id == task_id and lease_epoch in (None, c.lease_epoch):
                        return c
                self.changed.clear()
                await self.changed.wait()
        return await asyncio.wait_for(found(), timeout)


class FakeControl(control_pb2_grpc.ControlServiceServicer):
    """One deployment per app; bundles by digest."""

    def __init__(self):
        self.bundles: dict[str, bytes] = {}
        self.active: dict[str, apps_pb2.Deployment] = {}
        self.bundle_fetches = 0
        self.unauthorized: list = []
        # StartChildren: every request, and what creates the children (None: refused UNIMPLEMENTED).
        self.children_started: list[control_pb2.StartChildrenRequest] = []
        self.create_children = None

    def deploy(self, app_id: str, files: dict[str, str], module: str = "app") -> str:
        bundle, digest = make_bundle(files)
        self.bundles[digest] = bundle
        self.active[app_id] = apps_pb2.Deployment(app=app_id, digest=digest, module=module)
        return digest

    async def GetActiveDeployment(self, request, context):
        if not _authorized(context, self.unauthorized):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        if request.app_id not in self.active:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no deployment")
        return control_pb2.GetActiveDeploymentResponse(app_id=request.app_id, tenant_id="tenant-1",
                                                       deployment=self.active[request.app_id])

    async def GetBundle(self, request, context):
        if not _authorized(context, self.unauthorized):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        self.bundle_fetches += 1
        if request.digest not in self.bundles:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no bundle")
        return control_pb2.GetBundleResponse(bundle=self.bundles[request.digest])

    async def StartChildren(self, request, context):
        """The gateway's StartChildren as far as a host agent can tell: `create_children(request)`
        (an async function returning how many were created) stands in for its enqueue pipeline."""
        if not _authorized(context, self.unauthorized):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        self.children_started.append(request)
        if self.create_children is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this fake starts no children")
        return control_pb2.StartChildrenResponse(created=await self.create_children(request))


async def serve_fakes() -> tuple[grpc.aio.Server, int, FakeDispatcher, FakeControl]:
    """Both fakes on one server at a free loopback port."""
    server = grpc.aio.server()
    dispatcher, control = FakeDispatcher(), FakeControl()
    worker_pb2_grpc.add_DispatchServiceServicer_to_server(dispatcher, server)
    control_pb2_grpc.add_ControlServiceServicer_to_server(control, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port, dispatcher, control
