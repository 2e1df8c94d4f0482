"""`python -m loadtest.grpcfloor`: the CPU one grpc.aio stream message costs on this machine.

A Ratchet call crosses two call streams (SDK -> gateway -> history); this measures the
floor of one hop with nothing else running: a bidi stream in one process, the server
echoing one byte per message, CPU time (client and server together) per round trip
(write + read on each end) at several message sizes. Session 10 found ~200 us whatever
the size, which at 100 tasks per call is ~4 us per task for two hops before any work.
`--unary` measures one unary call per round trip instead (what a workflow step op pays on
each of its two hops, host agent -> dispatcher -> history).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import grpc

SERVICE, METHOD = "ratchet.bench.Floor", "Echo"


async def _unary_trips(channel: grpc.aio.Channel, payload: bytes, n: int, timeout_s: float) -> None:
    call = channel.unary_unary(f"/{SERVICE}/{METHOD}")
    for _ in range(n):
        await call(payload, timeout=timeout_s)


async def _stream_trips(call, payload: bytes, n: int) -> None:
    for _ in range(n):
        await call.write(payload)
        await call.read()


async def _measure(sizes: list[int], n: int, timeout_s: float, unary: bool = False) -> list[dict]:
    server = grpc.aio.server()

    async def echo(requests, context):
        async for msg in requests:
            yield msg[:1]

    async def echo_one(request, context):
        return request[:1]
    handler = grpc.method_handlers_generic_handler(SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(echo_one)
                                                             if unary else grpc.stream_stream_rpc_method_handler(echo)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    out = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            for size in sizes:
                payload = b"x" * size
                call = None if unary else channel.stream_stream(f"/{SERVICE}/{METHOD}")(timeout=timeout_s)

                async def trips(k: int, call=call, payload=payload) -> None:
                    await (_unary_trips(channel, payload, k, timeout_s) if call is None
                           else _stream_trips(call, payload, k))
                await trips(min(100, n))  # warm-up: connection, stream, allocator
                wall, cpu = time.perf_counter(), time.process_time()
                await trips(n)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                if call is not None:
                    await call.done_writing()
                out.append({"bytes": size, "round_trips": n, "cpu_us_per_round_trip": round(cpu / n * 1e6, 1),
                            "wall_us_per_round_trip": round(wall / n * 1e6, 1)})
    finally:
        await server.stop(None)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,6000,60000", help="message sizes in bytes, comma-separated")
    p.add_argument("-n", type=int, default=5000, help="round trips per size")
    p.add_argument("--unary", action="store_true", help="one unary call per round trip instead of a stream message")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    for row in asyncio.run(asyncio.wait_for(_measure(sizes, args.n, 120.0, args.unary), 300.0)):
        print(f"{row['bytes']:>7} B: {row['cpu_us_per_round_trip']:>6.1f} us CPU, "
              f"{row['wall_us_per_round_trip']:>6.1f} us wall per round trip (client + server, one process)")


if __name__ == "__main__":
    main()
