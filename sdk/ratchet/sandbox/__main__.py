"""`python -m ratchet.sandbox describe|run`: the in-sandbox stub's entry point."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from ratchet.errors import DiscoveryError
from ratchet.sandbox.discovery import load_app


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ratchet.sandbox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    describe = sub.add_parser("describe", help="print the app's handlers and policies as JSON")
    describe.add_argument("--app-dir", required=True, help="the app folder")
    describe.add_argument("--module", help="module to import (default: ratchet.toml [app] module, else 'app')")
    run = sub.add_parser("run", help="serve a host agent over its Unix socket")
    run.add_argument("--socket", required=True, help="the agent's Unix socket path")
    run.add_argument("--app-dir", required=True, help="the extracted app bundle")
    run.add_argument("--module", help="module to import (default as for describe)")
    run.add_argument("--parent-pid", type=int, help="the agent's pid: die with it (PR_SET_PDEATHSIG)")
    run.add_argument("--concurrency", type=int, default=1, help="most tasks run at once, each in its own thread")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the stub; returns the exit status (2 when the app cannot be loaded)."""
    args = _parser().parse_args(argv)
    if args.command == "run" and args.parent_pid:
        from ratchet.sandbox.lifeline import die_with_parent

        die_with_parent(args.parent_pid)  # before any customer code runs
    # Deploy packages the folder after describing it: leave no __pycache__ behind.
    sys.dont_write_bytecode = True
    try:
        # Customer prints at import time must not corrupt the JSON on stdout.
        with contextlib.redirect_stdout(sys.stderr):
            module, _, specs = load_app(args.app_dir, args.module)
    except DiscoveryError as e:
        print(f"ratchet: cannot load the app: {e}", file=sys.stderr)
        return 2
    if args.command == "describe":
        # One line: callers may scan stdout line by line for the description.
        print(json.dumps({"module": module, "handlers": [s.describe() for s in specs]}))
        return 0
    from ratchet.sandbox.runner import serve

    serve(args.socket, module, specs, args.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main())
