"""The fault proxy on loopback: pass-through, delay, one-way drop, blackhole,
reset and refuse, changed at run time from the test thread; and Postgres
through it."""

from __future__ import annotations

import asyncio
import socket
import socketserver
import threading
import time

import pytest

from ratchet.libs.faultproxy import ProxyThread


class Echo(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        self.received = bytearray()
        super().__init__(("127.0.0.1", 0), EchoHandler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


class EchoHandler(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            try:
                data = self.request.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.server.received.extend(data)
            try:
                self.request.sendall(data)
            except OSError:
                return


@pytest.fixture
def echo():
    server = Echo()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def link(echo):
    proxies = ProxyThread().start()
    yield proxies.add("echo", "127.0.0.1", echo.server_address[1])
    proxies.stop()


def connect(link) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", link.port), timeout=5)
    s.settimeout(2)
    return s


def roundtrip(s: socket.socket, data: bytes = b"ping") -> bytes:
    s.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def refused(link) -> bool:
    """True once a new connection is reset (or closed) by the proxy; waits up to 5 s for it.
    The RST may even beat connect() back."""
    try:
        s = connect(link)
    except (ConnectionResetError, ConnectionRefusedError):
        return True
    with s:
        s.settimeout(5)
        try:
            s.sendall(b"a")
            return s.recv(10) == b""
        except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
            return True


def test_pass_through(link):
    with connect(link) as s:
        assert roundtrip(s, b"x" * 200_000) == b"x" * 200_000
    assert link.stats.connections == 1 and link.stats.bytes["up"] == 200_000


def test_delay_both_ways_changes_at_run_time(link):
    with connect(link) as s:
        assert roundtrip(s) == b"ping"
        link.delay(0.3)
        t0 = time.monotonic()
        assert roundtrip(s) == b"ping"
        assert time.monotonic() - t0 >= 0.55
        link.heal()
        t0 = time.monotonic()
        assert roundtrip(s) == b"ping"
        assert time.monotonic() - t0 < 0.25


def test_drop_down_delivers_the_request_but_loses_the_reply(link, echo):
    with connect(link) as s:
        link.drop("down")
        s.sendall(b"commit")
        assert wait_for(lambda: bytes(echo.received) == b"commit"), "the server got the request"
        s.settimeout(0.4)
        with pytest.raises(socket.timeout):
            s.recv(10)
    assert link.stats.dropped["down"] == len(b"commit")


def test_drop_up_loses_the_request(link, echo):
    with connect(link) as s:
        link.drop("up")
        s.sendall(b"lost")
        s.settimeout(0.4)
        with pytest.raises(socket.timeout):
            s.recv(10)
    assert bytes(echo.received) == b""


def test_blackhole_hangs_new_and_open_connections_then_heals(link):
    with connect(link) as open_:
        link.blackhole()
        open_.settimeout(0.3)
        with pytest.raises(socket.timeout):
            roundtrip(open_)
        with connect(link) as new:
            new.settimeout(0.3)
            with pytest.raises(socket.timeout):
                roundtrip(new)
    link.heal()
    with connect(link) as s:
        assert roundtrip(s) == b"ping"


def test_reset_kills_open_connections_with_rst(link):
    with connect(link) as s:
        assert roundtrip(s) == b"ping"
        assert link.reset() == 1
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            roundtrip(s)
            roundtrip(s)
    with connect(link) as s:  # a reset is one-shot: new connections work
        assert roundtrip(s) == b"ping"


def test_refuse_resets_new_connections_until_healed(link):
    link.refuse(True)
    assert refused(link)
    assert link.stats.refused == 1
    link.heal()
    with connect(link) as s:
        assert roundtrip(s) == b"ping"


def test_upstream_down_resets_the_client(echo):
    proxies = ProxyThread().start()
    try:
        port = echo.server_address[1]
        echo.shutdown()
        echo.server_close()
        link = proxies.add("dead", "127.0.0.1", port)
        assert refused(link)
    finally:
        proxies.stop()


def test_direction_is_checked(link):
    with pytest.raises(ValueError):
        link.drop("sideways")


def test_postgres_through_the_proxy(pg_cluster):
    import asyncpg

    proxies = ProxyThread().start()
    link = proxies.add("pg", "127.0.0.1", pg_cluster.port)
    dsn = f"postgresql://{pg_cluster.user}@127.0.0.1:{link.port}/postgres"

    async def scenario():
        conn = await asyncpg.connect(dsn, timeout=5)
        assert await conn.fetchval("SELECT 1", timeout=5) == 1
        link.blackhole()
        with pytest.raises(asyncio.TimeoutError):
            await conn.fetchval("SELECT 2", timeout=0.5)
        link.heal()
        link.reset()
        conn2 = await asyncpg.connect(dsn, timeout=5)
        assert await conn2.fetchval("SELECT 3", timeout=5) == 3
        await conn2.close()
        conn.terminate()

    try:
        asyncio.run(scenario())
    finally:
        proxies.stop()


def test_heal_resets_connections_that_lost_bytes_and_keeps_the_others(link, echo):
    """TCP never delivers a stream with a hole: a connection that lost bytes is reset on heal
    instead of resuming with the bytes after the hole (HTTP/2 misparses such a stream)."""
    with connect(link) as lossy, connect(link) as idle:
        assert roundtrip(lossy) == b"ping" and roundtrip(idle) == b"ping"
        link.drop("up")
        lossy.sendall(b"lost")
        assert wait_for(lambda: link.stats.dropped["up"] >= 4)
        assert link.heal() == 1
        lossy.settimeout(2)
        try:
            got = lossy.recv(10)
        except ConnectionResetError:
            got = b""
        assert got == b"", "a connection with a hole in its stream must not carry on"
        assert roundtrip(idle) == b"ping", "a connection that lost nothing carries on"
    with connect(link) as fresh:
        assert roundtrip(fresh) == b"ping"
