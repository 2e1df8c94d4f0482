"""A service's named background loops: started from a name and an `async def run()`,
restarted after a delay when run() raises, stopped together (or some first) on shutdown.

Every service runs its loops here. A loop that dies of a bug must come back, or what it
drives stops for good while the process looks healthy; a run() that returns has finished
its job and stays stopped, so one-shot start-up work (waiting to report SERVING) fits too.

    loops = Loops("hostagent", clock)
    loops.start("poll", poll.run)
    loops.start("heartbeat", heartbeat.run)
    ...
    await loops.stop("poll")    # these first, each cancelled and awaited in turn
    await loops.stop()          # then every loop left, together
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ratchet.libs.clock import Clock, SystemClock

log = logging.getLogger(__name__)

RESTART_S = 1.0


class Loops:
    """The background loops of one service, by name.

    `service` names the service in log lines and task names (`<service>-<loop>`); the
    restart delay is slept on `clock`, so a fake clock decides when a crashed loop returns.
    """

    def __init__(self, service: str, clock: Clock | None = None, restart_s: float = RESTART_S):
        self.service = service
        self.restart_s = restart_s
        self._clock = clock or SystemClock()
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        """Run `run()` in the background as loop `name`, again after the restart delay each
        time it raises. A name still running is a bug of the caller: ValueError."""
        task = self._tasks.get(name)
        if task is not None and not task.done():
            raise ValueError(f"{self.service} loop {name!r} is already running")
        self._tasks[name] = asyncio.create_task(self._supervise(name, run), name=f"{self.service}-{name}")

    def running(self, name: str) -> bool:
        """True while loop `name` runs or waits to restart; False once it returned or stopped."""
        task = self._tasks.get(name)
        return task is not None and not task.done()

    async def stop(self, *names: str) -> None:
        """Cancel loops and wait until they have ended. With names, only those, one after
        the other in that order (names not running are skipped); without, every loop left,
        all at once. A caller cancelled while it waits is cancelled, as it should be."""
        if names:
            for name in names:
                await self._end([name])
        else:
            await self._end(list(self._tasks))

    async def _end(self, names: list[str]) -> None:
        tasks = [task for name in names if (task := self._tasks.pop(name, None)) is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # never raises what the tasks raised, only our own cancellation

    async def _supervise(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await run()
                return
            except Exception:
                log.exception("%s %s loop crashed; restarting in %.1fs", self.service, name, self.restart_s)
                await self._clock.sleep(self.restart_s)
