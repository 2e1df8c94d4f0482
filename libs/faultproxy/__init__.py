"""A small asyncio TCP proxy that injects network faults on loopback, in place
of `tc netem` (which these machines do not have).

Put one in front of Postgres or between two services, point the client at
``link.port``, then change its behaviour while traffic flows::

    proxies = ProxyThread().start()              # its own event loop, in a thread
    link = proxies.add("pg", "127.0.0.1", 5432)  # listens on 127.0.0.1:link.port
    link.delay(0.5)                              # every chunk, both directions
    link.drop("down")                            # server->client bytes vanish: commits whose ack is lost
    link.blackhole()                             # both directions vanish; connections hang
    link.reset()                                 # RST every open connection
    link.refuse(True)                            # new connections are RST at once
    link.heal()                                  # back to a clean pass-through

Directions: ``up`` is client->server, ``down`` is server->client. Every control
method is safe to call from any thread. Bytes are never reordered: a delayed
chunk holds the chunks behind it.

A connection that lost bytes never forwards again, and heal() resets it: TCP
never delivers a byte stream with a hole in it (the lost segments are resent
or the connection dies), so resuming after the hole would hand the peers a
corrupt stream no real network produces (HTTP/2 then misparses frames and
HPACK state: a gRPC call once got another stream's status).
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
import threading
import time

DIRECTIONS = ("up", "down")


@dataclasses.dataclass
class Policy:
    """What one direction of a link does to each chunk."""

    delay_s: float = 0.0
    drop: bool = False


@dataclasses.dataclass
class Stats:
    connections: int = 0
    refused: int = 0
    resets: int = 0
    bytes: dict = dataclasses.field(default_factory=lambda: {"up": 0, "down": 0})
    dropped: dict = dataclasses.field(default_factory=lambda: {"up": 0, "down": 0})


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with an RST instead of a FIN (SO_LINGER 0), like a crashed peer or a reset middlebox."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class Link:
    """One listening port forwarding to one upstream address."""

    def __init__(self, name: str, upstream_host: str, upstream_port: int, loop: asyncio.AbstractEventLoop,
                 listen_host: str = "127.0.0.1", listen_port: int = 0, connect_timeout_s: float = 5.0):
        self.name = name
        self.upstream = (upstream_host, upstream_port)
        self.listen = (listen_host, listen_port)
        self.port = listen_port
        self.loop = loop
        self.connect_timeout_s = connect_timeout_s
        self.policy = {d: Policy() for d in DIRECTIONS}
        self.refusing = False
        self.stats = Stats()
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self._torn: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()  # lost bytes

    # -- control (any thread) ---------------------------------------------
    def delay(self, seconds: float, direction: str = "both") -> None:
        """Hold each chunk this long before forwarding it."""
        for d in self._dirs(direction):
            self.policy[d] = dataclasses.replace(self.policy[d], delay_s=float(seconds))

    def drop(self, direction: str = "both") -> None:
        """Silently discard bytes in this direction (connections stay open)."""
        for d in self._dirs(direction):
            self.policy[d] = dataclasses.replace(self.policy[d], drop=True)

    def blackhole(self) -> None:
        """Discard everything both ways: peers see a hung connection, not an error."""
        self.drop("both")

    def refuse(self, on: bool = True) -> None:
        """While on, new connections are accepted and reset at once."""
        self.refusing = on

    def reset(self) -> int:
        """Reset every open connection (both sides get an RST). Returns how many."""
        return self._call(self._reset_all)

    def heal(self) -> int:
        """Clean pass-through again for new connections and for open ones that lost nothing;
        an open connection that lost bytes is reset (see the module doc). Returns how many."""
        self.refusing = False
        for d in DIRECTIONS:
            self.policy[d] = Policy()
        return self._call(self._reset_torn)

    def describe(self) -> dict:
        return {"name": self.name, "port": self.port, "upstream": f"{self.upstream[0]}:{self.upstream[1]}",
                "refusing": self.refusing, "open": len(self._conns),
                **{d: dataclasses.asdict(self.policy[d]) for d in DIRECTIONS}}

    @staticmethod
    def _dirs(direction: str) -> tuple[str, ...]:
        if direction == "both":
            return DIRECTIONS
        if direction not in DIRECTIONS:
            raise ValueError(f"direction is up, down or both, not {direction!r}")
        return (direction,)

    def _call(self, fn):
        """Run fn on the link's loop and return its result, from any thread."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            return fn()
        async def wrapped():
            return fn()
        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result(timeout=10)

    # -- the proxy (on the loop) --------------------------------------------
    async def start(self) -> Link:
        self._server = await asyncio.start_server(self._accept, *self.listen)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self._reset_all()

    def _reset_torn(self) -> int:
        torn, self._torn = self._torn & self._conns, set()
        return self._reset(torn)

    def _reset_all(self) -> int:
        return self._reset(set(self._conns))

    def _reset(self, conns: set) -> int:
        """RST both sides of each connection and forget it."""
        for client, upstream in conns:
            _rst(client)
            if upstream is not None:
                _rst(upstream)
        self._conns -= conns
        self.stats.resets += len(conns)
        return len(conns)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            self.stats.refused += 1
            _rst(writer)
            return
        self.stats.connections += 1
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.upstream),
                                                          self.connect_timeout_s)
        except (TimeoutError, OSError):
            _rst(writer)  # upstream down: the client sees what it would see without us
            return
        conn = (writer, up_writer)
        self._conns.add(conn)
        try:
            await asyncio.gather(self._pipe(reader, up_writer, "up", conn),
                                 self._pipe(up_reader, writer, "down", conn))
        finally:
            self._conns.discard(conn)
            self._torn.discard(conn)
            for w in conn:
                w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str,
                    conn: tuple) -> None:
        queue: asyncio.Queue = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, writer, direction))
        try:
            while True:
                try:
                    data = await reader.read(65536)
                except (ConnectionError, OSError):
                    break
                if not data:
                    break
                policy = self.policy[direction]
                if policy.drop or conn in self._torn:
                    self._torn.add(conn)  # a hole in the stream: nothing after it may pass
                    self.stats.dropped[direction] += len(data)
                    continue
                self.stats.bytes[direction] += len(data)
                queue.put_nowait((time.monotonic() + policy.delay_s, data))
        finally:
            queue.put_nowait(None)
            await sender

    async def _send(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, direction: str) -> None:
        while True:
            item = await queue.get()
            if item is None:
                break
            due, data = item
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if writer.is_closing():
                continue
            try:
                writer.write(data)
                await writer.drain()
            except (ConnectionError, OSError):
                continue
        if not writer.is_closing():
            try:
                writer.write_eof()  # half-close: pass the peer's FIN through
            except (OSError, RuntimeError):
                pass


class ProxyThread:
    """An event loop in a daemon thread hosting any number of links, so a
    synchronous test can run proxies beside the processes it drives."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.links: dict[str, Link] = {}
        self._thread = threading.Thread(target=self.loop.run_forever, name="faultproxy", daemon=True)

    def start(self) -> ProxyThread:
        self._thread.start()
        return self

    def add(self, name: str, upstream_host: str, upstream_port: int, listen_port: int = 0) -> Link:
        """Start a link listening on 127.0.0.1 (a free port unless given)."""
        link = Link(name, upstream_host, upstream_port, self.loop, listen_port=listen_port)
        asyncio.run_coroutine_threadsafe(link.start(), self.loop).result(timeout=10)
        self.links[name] = link
        return link

    def heal_all(self) -> None:
        for link in self.links.values():
            link.heal()

    def stop(self) -> None:
        async def close_all():
            for link in self.links.values():
                await link.close()
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(timeout=10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        self.loop.close()
