"""Enqueue load over gRPC with asyncio, closed and open loop.

The requests have the shape ratchet.Client sends (every enqueue carries a
task id the SDK mints per call, so a resend is deduplicated, and its payload as
JSON text, payload_json). Single enqueues go through
the SDK's AsyncClient, i.e. as messages on its enqueue stream
(TaskService.EnqueueTaskStream), as an async producer sends them; with
`stream=False` they are unary EnqueueTask calls (what a REST or plain-gRPC
client sends). Batches and reads use grpc.aio stubs. One Python process keeps
dozens of calls in flight and an open-loop schedule.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import random
import time
import uuid

import grpc

from ratchet._wire import to_json
from ratchet.aio import AsyncClient
from ratchet.api.tasks.v1 import tasks_pb2, tasks_pb2_grpc
from ratchet.client import RatchetError, batch_request
from ratchet.libs.rpc.client import aio_channel
from ratchet.libs.shardmap import new_task_id

TASK_TYPE = "noop"


@dataclasses.dataclass
class LoadResult:
    """What a load phase did: acks, per-call latency (ms), errors by status code."""

    acked: int = 0
    calls: int = 0
    wall_s: float = 0.0
    latency_ms: list[float] = dataclasses.field(default_factory=list)
    errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    task_ids: list[str] = dataclasses.field(default_factory=list)
    dropped: int = 0  # open loop: sends skipped because too many were in flight
    send_lag_ms: list[float] = dataclasses.field(default_factory=list)  # open loop: schedule slip

    @property
    def rate(self) -> float:
        return self.acked / self.wall_s if self.wall_s > 0 else 0.0


class Gateway:
    """The gateway's TaskService with the app's API key: single and batch enqueues through
    the SDK's AsyncClient (its enqueue stream, or unary calls with stream=False, no retries:
    every failure is counted), the rest through aio stubs."""

    def __init__(self, target: str, api_key: str, channels: int = 2, *, stream: bool = True):
        self.channels = [aio_channel(target) for _ in range(channels)]
        self.stubs = [tasks_pb2_grpc.TaskServiceStub(c) for c in self.channels]
        self.metadata = (("authorization", f"Bearer {api_key}"),)
        self.client = AsyncClient(target, api_key, timeout=30.0, max_retries=0, stream=stream)
        self._next = 0

    def stub(self) -> tasks_pb2_grpc.TaskServiceStub:
        self._next = (self._next + 1) % len(self.stubs)
        return self.stubs[self._next]

    @staticmethod
    def request(n: int, keyed: bool = True, slot: int | None = None) -> tasks_pb2.EnqueueTaskRequest:
        """keyed: deduplicated across resends as the SDK makes every enqueue (a task id it
        mints per call, ratchet.client.enqueue_request; the items of one batch call share a
        slot per 100, ratchet.client.batch_request); else nothing to dedupe by."""
        return tasks_pb2.EnqueueTaskRequest(task_type=TASK_TYPE, task_id=new_task_id(slot) if keyed else "",
                                            payload_json=to_json({"n": n}))

    @staticmethod
    def keyed_request(n: int) -> tasks_pb2.EnqueueTaskRequest:
        """An enqueue with a caller's idempotency key (24 h window, conflict detection)."""
        return tasks_pb2.EnqueueTaskRequest(task_type=TASK_TYPE, idempotency_key=f"bench-{uuid.uuid4()}",
                                            payload_json=to_json({"n": n}))

    async def enqueue(self, req: tasks_pb2.EnqueueTaskRequest) -> str:
        return (await self.client.send_enqueue(req)).task_id

    async def enqueue_batch(self, req: tasks_pb2.EnqueueTasksRequest | list[tasks_pb2.EnqueueTaskRequest]
                            ) -> list[str]:
        if isinstance(req, list):
            req = tasks_pb2.EnqueueTasksRequest(tasks=req)
        # The SDK's path: a batch call on its enqueue stream (unary EnqueueTasks with stream=False).
        return list((await self.client.send_enqueue_batch(req)).task_ids)

    async def get(self, task_id: str, timeout: float = 10.0) -> tasks_pb2.Task:
        resp = await self.stub().GetTask(tasks_pb2.GetTaskRequest(task_id=task_id), timeout=timeout,
                                         metadata=self.metadata)
        return resp.task

    async def close(self) -> None:
        await self.client.close()
        for c in self.channels:
            await c.close()


def _code(e: BaseException) -> str:
    if isinstance(e, grpc.aio.AioRpcError):
        return e.code().name
    if isinstance(e, RatchetError):
        return e.code
    return type(e).__name__


async def closed_loop(gw: Gateway, producers: int, seconds: float, *, keyed: bool = True,
                      max_tasks: int = 1_000_000, request=None) -> LoadResult:
    """`producers` concurrent callers, each sending the next enqueue when the last is acked
    (request(n) builds task n's request; default gw.request, the SDK's shape)."""
    make = request or (lambda n: gw.request(n, keyed))
    res = LoadResult()
    deadline = time.monotonic() + seconds
    counter = iter(range(max_tasks))

    async def producer() -> None:
        while time.monotonic() < deadline:
            n = next(counter, None)
            if n is None:
                return
            t = time.perf_counter()
            res.calls += 1
            try:
                res.task_ids.append(await gw.enqueue(make(n)))
                res.latency_ms.append((time.perf_counter() - t) * 1000)
                res.acked += 1
            except (TimeoutError, grpc.aio.AioRpcError, RatchetError) as e:
                res.errors[_code(e)] += 1
    t0 = time.monotonic()
    await asyncio.gather(*(producer() for _ in range(producers)))
    res.wall_s = time.monotonic() - t0
    return res


async def open_loop(gw: Gateway, rate: float, seconds: float, *, seed: int = 1, keyed: bool = True,
                    max_inflight: int = 5000) -> LoadResult:
    """Poisson arrivals at `rate`/s for `seconds`; latency counts from the scheduled send
    time, so a stalled server shows up as latency instead of hiding it (no coordinated omission)."""
    res = LoadResult()
    rng = random.Random(seed)
    inflight: set[asyncio.Task] = set()

    async def one(n: int, scheduled: float) -> None:
        res.calls += 1
        try:
            res.task_ids.append(await gw.enqueue(gw.request(n, keyed)))
            res.latency_ms.append((time.perf_counter() - scheduled) * 1000)
            res.acked += 1
        except (TimeoutError, grpc.aio.AioRpcError, RatchetError) as e:
            res.errors[_code(e)] += 1

    t0 = time.perf_counter()
    next_at, n = t0, 0
    while next_at - t0 < seconds:
        delay = next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        res.send_lag_ms.append(max(0.0, (time.perf_counter() - next_at) * 1000))
        if len(inflight) >= max_inflight:
            res.dropped += 1
        else:
            task = asyncio.create_task(one(n, next_at))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        n += 1
        next_at += rng.expovariate(rate)
    if inflight:
        await asyncio.wait(inflight, timeout=30)
    res.wall_s = time.perf_counter() - t0
    return res


def _calls(batch: int, total: int, seconds: float | None):
    """Call numbers for the batch loops, shared by their producers: every call of `total`
    tasks, or, with `seconds`, those started within that long of the first (a time-bounded
    cell: at 100k+ tasks/s a fixed count is a fraction of a second of calls, too short for
    one run to settle a rate)."""
    n = (total + batch - 1) // batch
    if seconds is None:
        yield from range(n)
        return
    end = time.monotonic() + seconds
    for i in range(n):
        if time.monotonic() >= end:
            return
        yield i


async def batches(gw: Gateway, batch: int, producers: int, total: int, *, keyed: bool = True,
                  seconds: float | None = None) -> LoadResult:
    """Enqueue `total` tasks in calls of `batch` from `producers` concurrent callers; with
    `seconds`, no call starts after that long (`total` is then a cap)."""
    res = LoadResult()
    calls = _calls(batch, total, seconds)

    async def producer() -> None:
        for i in calls:
            size = min(batch, total - i * batch)
            # keyed: the SDK's enqueue_batch requests, made by its own code (ids minted per call;
            # columns, as AsyncClient.enqueue_batch sends them)
            req = (batch_request([{"task_type": TASK_TYPE, "payload": {"n": i * batch + k}} for k in range(size)],
                                 columns=True)
                   if keyed else tasks_pb2.EnqueueTasksRequest(tasks=[gw.request(i * batch + k, False)
                                                                       for k in range(size)]))
            t = time.perf_counter()
            res.calls += 1
            try:
                ids = await gw.enqueue_batch(req)
                res.latency_ms.append((time.perf_counter() - t) * 1000)
                res.acked += len(ids)
                res.task_ids.extend(ids)
            except (TimeoutError, grpc.aio.AioRpcError, RatchetError) as e:
                res.errors[_code(e)] += 1
    t0 = time.monotonic()
    await asyncio.gather(*(producer() for _ in range(producers)))
    res.wall_s = time.monotonic() - t0
    return res


def rest_enqueue(base_url: str, api_key: str, *, connections: int = 32):
    """(send(n), close()) for POST {base_url}/v1/tasks over one aiohttp session: each task with
    its own idempotency key (a REST client has no id minting; unique across every loop run with
    this sender), any non-200 raised as RuntimeError with the status and body. For
    closed_loop_fn / open_loop_fn."""
    import aiohttp

    session: aiohttp.ClientSession | None = None
    url = base_url.rstrip("/") + "/v1/tasks"
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    prefix = f"rest-{uuid.uuid4().hex[:12]}-"
    keys = itertools.count()

    async def send(n: int) -> None:
        nonlocal session
        if session is None:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections),
                                            timeout=aiohttp.ClientTimeout(total=30))
        body = to_json({"task_type": TASK_TYPE, "payload": {"n": n}, "idempotency_key": f"{prefix}{next(keys)}"})
        async with session.post(url, data=body, headers=headers) as r:
            text = await r.text()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {text[:200]}")

    async def close() -> None:
        if session is not None:
            await session.close()
    return send, close


# -- the same loops over any system's enqueue call (peers, issue 5) ------------
# `send(n)` enqueues task number n and returns when the system acknowledged it;
# any exception counts as an error under its class name.
async def closed_loop_fn(send, producers: int, seconds: float, *, max_tasks: int = 1_000_000) -> LoadResult:
    """`producers` concurrent callers of `send`, each calling again when the last one returned."""
    res = LoadResult()
    deadline = time.monotonic() + seconds
    counter = iter(range(max_tasks))

    async def producer() -> None:
        while time.monotonic() < deadline:
            n = next(counter, None)
            if n is None:
                return
            t = time.perf_counter()
            res.calls += 1
            try:
                await send(n)
                res.latency_ms.append((time.perf_counter() - t) * 1000)
                res.acked += 1
            except Exception as e:  # noqa: BLE001 - a peer's error is a counted outcome
                res.errors[type(e).__name__] += 1
    t0 = time.monotonic()
    await asyncio.gather(*(producer() for _ in range(producers)))
    res.wall_s = time.monotonic() - t0
    return res


async def open_loop_fn(send, rate: float, seconds: float, *, seed: int = 1, max_inflight: int = 5000) -> LoadResult:
    """Poisson arrivals of `send` at `rate`/s; latency from the scheduled send time."""
    res = LoadResult()
    rng = random.Random(seed)
    inflight: set[asyncio.Task] = set()

    async def one(n: int, scheduled: float) -> None:
        res.calls += 1
        try:
            await send(n)
            res.latency_ms.append((time.perf_counter() - scheduled) * 1000)
            res.acked += 1
        except Exception as e:  # noqa: BLE001 - any failed call is counted by its type; the load goes on
            res.errors[type(e).__name__] += 1

    t0 = time.perf_counter()
    next_at, n = t0, 0
    while next_at - t0 < seconds:
        delay = next_at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        res.send_lag_ms.append(max(0.0, (time.perf_counter() - next_at) * 1000))
        if len(inflight) >= max_inflight:
            res.dropped += 1
        else:
            task = asyncio.create_task(one(n, next_at))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        n += 1
        next_at += rng.expovariate(rate)
    if inflight:
        await asyncio.wait(inflight, timeout=30)
    res.wall_s = time.perf_counter() - t0
    return res


async def batches_fn(send_batch, batch: int, producers: int, total: int, *,
                     seconds: float | None = None) -> LoadResult:
    """`total` tasks in calls of `send_batch(first_n, size)` from `producers` concurrent callers;
    with `seconds`, no call starts after that long (`total` is then a cap)."""
    res = LoadResult()
    calls = _calls(batch, total, seconds)

    async def producer() -> None:
        for i in calls:
            size = min(batch, total - i * batch)
            t = time.perf_counter()
            res.calls += 1
            try:
                await send_batch(i * batch, size)
                res.latency_ms.append((time.perf_counter() - t) * 1000)
                res.acked += size
            except Exception as e:  # noqa: BLE001 - any failed call is counted by its type; the load goes on
                res.errors[type(e).__name__] += 1
    t0 = time.monotonic()
    await asyncio.gather(*(producer() for _ in range(producers)))
    res.wall_s = time.monotonic() - t0
    return res
