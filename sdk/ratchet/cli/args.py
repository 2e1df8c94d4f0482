"""Argument and output helpers shared by the CLI's command modules (no gRPC
import here: the client loads only when a command runs)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ratchet.cli.errors import CLIError

# Exit code of the waiting commands when the task or operation did not succeed.
EXIT_NOT_SUCCEEDED = 2


def emit(data: Any) -> None:
    """Print a command's answer as JSON."""
    print(json.dumps(data, indent=2, sort_keys=False))


def parse_payload(text: str | None) -> Any:
    """The --payload JSON, or CLIError saying how to quote it."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CLIError(f"--payload is not valid JSON ({e}); quote it, e.g. --payload '{{\"name\": \"Ada\"}}'") from None


def state_dir_arg(p: argparse.ArgumentParser, default: str | None = None) -> None:
    """--state-dir: where `ratchet dev up` keeps the platform's records."""
    help_text = ("platform state folder" + (f" (default {default})" if default else
                 "; default: RATCHET_ENDPOINT/RATCHET_API_KEY, else ./.ratchet"))
    p.add_argument("--state-dir", default=default, help=help_text)


def filter_args(p: argparse.ArgumentParser, states_help: str) -> None:
    """The task filter of a search or a bulk operation."""
    p.add_argument("--state", action="append", metavar="STATE", help=states_help)
    p.add_argument("--type", dest="task_type", metavar="T", help="task type")
    p.add_argument("--queue", metavar="Q", help="queue")
    p.add_argument("--error-class", metavar="C", help="final (or last) error class, e.g. KeyError")
    p.add_argument("--since", help="ISO 8601 time, or a time ago such as 2h or 7d")
    p.add_argument("--until", help="ISO 8601 time, or a time ago such as 30m")
