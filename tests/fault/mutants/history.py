"""`python -m tests.fault.mutants.history --mutation NAME <history's arguments>`: the history
service with one guard removed (tests/fault/mutants/mutations.py), for the fault checker's mutation runs.

The mutation may also come from RATCHET_FAULT_MUTATION (how the fault platform starts it: the
platform runs every service as `python -m MODULE --config FILE`). Everything else is history's
own main; a mutation that no longer matches the shipped code stops it before it serves.
"""

from __future__ import annotations

import argparse
import os
import sys

import ratchet.libs.rpc.grpc_env  # noqa: F401 - before anything that loads grpc: sets its core settings
from ratchet.services.history import __main__ as history_main
from tests.fault.mutants.mutations import ENV, MUTATIONS, MutationError, installed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault.mutants.history", add_help=False,
                                     description="history with one guard removed; other arguments go to history")
    parser.add_argument("--mutation", default=os.environ.get(ENV), choices=sorted(MUTATIONS),
                        help=f"the guard to remove (default: ${ENV})")
    args, rest = parser.parse_known_args(argv)
    if not args.mutation:
        parser.error(f"--mutation (or {ENV}) is required: one of {', '.join(sorted(MUTATIONS))}")
    try:
        with installed(args.mutation) as m:
            print(f"history MUTANT {m.name}: {m.doc}", file=sys.stderr, flush=True)
            return history_main.main(rest)
    except MutationError as e:
        print(f"history mutant: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
