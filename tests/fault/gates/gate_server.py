"""A stand-in server for the gate tests: passes a gate N times (sync or in an
event loop), printing a line after each pass so the test sees the ordering."""

import asyncio
import sys
import time

from ratchet.libs import gates


def main() -> None:
    mode, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print("ready", flush=True)
    if mode == "sync":
        for i in range(n):
            try:
                gates.reach(name)
            except gates.GateError:
                print(f"raised {i}", flush=True)
                continue
            print(f"passed {i} {time.monotonic()}", flush=True)
    else:
        async def one(i):
            try:
                await gates.reach(name)
            except gates.GateError:
                print(f"raised {i}", flush=True)
                return
            print(f"passed {i} {time.monotonic()}", flush=True)

        async def ticker():  # proves a held gate does not block the loop
            for _ in range(20):
                await asyncio.sleep(0.02)
            print("ticker done", flush=True)

        async def run():
            await asyncio.gather(ticker(), *(one(i) for i in range(n)))
        asyncio.run(run())


if __name__ == "__main__":
    main()
