"""The start-up every service's `python -m ratchet.services.<name> --config FILE` shares:
parse the arguments, load and check the config (exit 2 with the reason on a bad one), set
up logging, start the server, serve until SIGTERM/SIGINT, stop it gracefully.

A service's __main__.py imports ratchet.libs.rpc.grpc_env first, then declares its
ServiceMain and calls run().
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Callable
from typing import Any, Protocol

from ratchet.libs.config import ConfigError, describe
from ratchet.libs.rpc.server import run_until_signal, setup_logging, tune_gc


class Server(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class ServiceMain:
    """How one service starts. `server(config)` builds it; `fatal` lists the errors that end
    the process with exit status 1 and `fatal_hint` says what they mean to an operator
    (anything else is a bug and raises)."""

    name: str
    summary: str
    config_cls: type
    env_prefix: str
    load: Callable[[str | None], Any]
    server: Callable[[Any], Server]
    # After start-up, what exists lives as long as the process: freeze it out of the GC's
    # view (the services on the task path do; libs/rpc/server.tune_gc).
    freeze_gc: bool = False
    before_start: Callable[[Any], None] | None = None
    fatal: tuple[type[BaseException], ...] = ()
    fatal_hint: str = ""

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            prog=f"python -m ratchet.services.{self.name}", description=self.summary,
            epilog=f"Config fields (JSON file keys; env {self.env_prefix}<FIELD> overrides):\n"
                   f"{describe(self.config_cls)}",
            formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--config", help="JSON config file (fields below)")
        return parser

    def run(self, argv: list[str] | None = None) -> int:
        """The process's exit status: 0 after a graceful stop, 2 on a bad config, 1 on a fatal error."""
        args = self.parser().parse_args(argv)
        try:
            config = self.load(args.config)
        except ConfigError as e:
            print(f"{self.name}: {e}", file=sys.stderr)
            return 2
        setup_logging(self.name, config.log_level)
        if self.before_start is not None:
            self.before_start(config)
        try:
            asyncio.run(run_until_signal(lambda stop: self._serve(config, stop)))
        except self.fatal as e:
            print(f"{self.name}: {self.fatal_hint}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        return 0

    async def _serve(self, config: Any, stop: asyncio.Event) -> None:
        server = self.server(config)
        await server.start()
        if self.freeze_gc:
            tune_gc()
        try:
            await stop.wait()
        finally:
            await server.stop()
