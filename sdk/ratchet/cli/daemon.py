"""The detached supervisor behind `ratchet dev up --detach`.

    python -m ratchet.cli.daemon --state-dir DIR --shards N [--options FILE]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from ratchet.cli import dev


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ratchet.cli.daemon")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--options", default=None)
    args = parser.parse_args(argv)
    options = dev.load_options(args.options)
    return dev.serve(pathlib.Path(args.state_dir).resolve(), args.shards, options, announce=False)


if __name__ == "__main__":
    sys.exit(main())
