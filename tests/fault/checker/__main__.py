"""Check a run folder: ``python -m tests.fault.checker RUN_DIR``.

Prints one line per invariant and writes RUN_DIR/verdict.json; exits 1 when
any invariant fails.
"""

from __future__ import annotations

import argparse
import sys

from . import check_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fault.checker")
    parser.add_argument("run_dir", help="folder with history.jsonl, ledger.jsonl, dump.json and run.json")
    parser.add_argument("--no-write", action="store_true", help="do not write verdict.json")
    args = parser.parse_args(argv)
    verdict = check_dir(args.run_dir, write=not args.no_write)
    print(summary(verdict))
    return 0 if verdict["valid"] else 1


def summary(verdict: dict) -> str:
    """A few human lines: one per invariant, then the rerun command."""
    lines = [f"{'VALID' if verdict['valid'] else 'INVALID'}  seed={verdict.get('seed')} "
             f"scenario={verdict.get('scenario')}"]
    for name, res in verdict["invariants"].items():
        mark = "ok  " if res["valid"] else "FAIL"
        extra = f" error={res['error']}" if res.get("error") else ""
        first = res["counterexamples"][0]["problem"] if res["counterexamples"] else ""
        lines.append(f"  {mark} {name:22s} checked={res['checked']:<6} violations={res['violations']}{extra}"
                     + (f"  e.g. {first}" if first else ""))
    if verdict.get("rerun"):
        lines.append(f"  rerun: {verdict['rerun']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
