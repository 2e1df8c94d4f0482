"""The synchronous Client enqueues as calls on the enqueue stream (ratchet/_sync_stream.py):
one background thread and stream per client (per process after a fork), shared by every
thread that enqueues, with the same answers, errors and retries as the unary call.

The gateway here runs in this test's event loop, so the blocking client is always driven
from worker threads (asyncio.to_thread) while the loop serves it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading

import pytest

from ratchet.client import Client, Conflict, InvalidArgument, RatchetError

pytestmark = pytest.mark.timeout(60)


def _endpoint(env) -> str:
    return f"127.0.0.1:{env.gateway.grpc_port}"


def _keys_sent(env) -> set[str]:
    return {t.idempotency_key for n, c in env.history.calls if n == "CreateTasks" for t in c.tasks}


async def test_threads_enqueue_on_one_stream_and_share_its_messages(env):
    def burst() -> tuple[list[str], int, int, int]:
        with Client(_endpoint(env), env.api_key) as client:
            start = threading.Barrier(16)

            def one(i: int) -> str:
                if i < 16:  # the first 16 calls start together
                    start.wait(10)
                return client.enqueue("send", {"i": i}, idempotency_key=f"sync-stream-{i}")
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                ids = list(pool.map(one, range(64)))
            s = client._stream.stream
            return ids, s.opened, s.stream_calls, s.writes

    ids, opened, calls, writes = await asyncio.to_thread(burst)
    assert len(set(ids)) == 64 and opened == 1 and calls == 64
    assert writes < calls  # calls made while a write was in progress went out together
    assert {f"sync-stream-{i}" for i in range(64)} <= _keys_sent(env)


async def test_answers_and_errors_are_the_unary_calls(env):
    def use() -> None:
        with Client(_endpoint(env), env.api_key) as client:
            first = client.enqueue("send", {"v": 1}, idempotency_key="sync-dedupe")
            assert client.enqueue("send", {"v": 1}, idempotency_key="sync-dedupe") == first
            with pytest.raises(Conflict) as e:
                client.enqueue("send", {"v": 2}, idempotency_key="sync-dedupe")
            assert e.value.task_id == first and e.value.http_status == 409
            with pytest.raises(InvalidArgument, match="registered types") as bad:
                client.enqueue("no_such_type")
            assert bad.value.http_status == 400
            assert client.enqueue("send")  # the stream is still good: an unkeyed enqueue (minted id)
            assert client._stream.stream.opened == 1 and client._stream.stream.stream_calls == 5
    await asyncio.to_thread(use)


async def test_stream_false_keeps_unary_calls(env):
    def use() -> str:
        with Client(_endpoint(env), env.api_key, stream=False) as client:
            assert client._stream is None
            return client.enqueue("send", idempotency_key="sync-unary")
    assert await asyncio.to_thread(use)


async def test_close_ends_the_thread_and_later_enqueues_say_so(env):
    def use() -> None:
        client = Client(_endpoint(env), env.api_key)
        assert client.enqueue("send")
        thread = client._stream._thread
        assert thread.is_alive()
        client.close()
        client.close()  # idempotent
        assert not thread.is_alive()
        with pytest.raises(RatchetError, match="closed") as e:
            client.enqueue("send")
        assert e.value.code == "FAILED_PRECONDITION"
    await asyncio.to_thread(use)


_FORK = """
import os
from ratchet.client import Client
c = Client({endpoint!r}, {key!r})
for round in range({rounds}):
    if {used}:
        c.enqueue("send")  # the parent (re)starts its stream, and grpc.aio, before forking
    pid = os.fork()
    if pid == 0:
        try:
            tid = c.enqueue("send")
            s = c._stream.stream
            print("child", len(tid), c._stream.available(), s.stream_calls if s else 0, flush=True)
            os._exit(0)
        except BaseException as e:
            print("child failed", repr(e), flush=True)
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    print("parent", os.waitstatus_to_exitcode(status), len(c.enqueue("send")), flush=True)
"""


async def _run_script(code: str, env=None) -> str:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env=env)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 45)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode()


@pytest.mark.parametrize("used", [True, False], ids=["parent-streamed", "parent-never-enqueued"])
async def test_a_forked_child_enqueues(env, used):
    """A pre-forking server's worker: grpc.aio does not survive fork(). The parent's stream is
    ended before every fork (and starts again on its next enqueue), and a child of a parent
    that had started one sends unary calls, which gRPC's fork support carries over; a child of
    a parent that never enqueued starts a stream of its own. (Real fork(), gRPC's default fork
    support. Without the pause the children died of SIGSEGV in about 2 forks of 5; without the
    unary fallback their enqueues hung until the deadline.)"""
    env_vars = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    rounds = 5 if used else 1
    out = await _run_script(_FORK.format(endpoint=_endpoint(env), key=env.api_key, used=used, rounds=rounds),
                            env_vars)
    lines = out.splitlines()
    # Every child answered and exited 0 (without the pause before fork, about 2 in 5 died of
    # SIGSEGV in gRPC: "parent -11").
    assert lines.count("parent 0 36") == rounds, out
    children = [line.rsplit(" ", 1)[0] for line in lines if line.startswith("child")]
    if used:
        assert children == ["child 36 False"] * rounds, out  # unary calls
    else:
        assert lines[0] == "child 36 True 1", out  # its own stream, one call on it


async def test_a_process_that_never_closes_its_client_still_exits(env):
    """The stream thread is a daemon: forgetting close() must not hang interpreter exit."""
    code = ("from ratchet.client import Client\n"
            f"c = Client('{_endpoint(env)}', '{env.api_key}')\n"
            "print(c.enqueue('send'))\n")
    assert len((await _run_script(code)).strip()) == 36
