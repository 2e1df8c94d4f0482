"""`ratchet`: run a local platform, deploy apps, create tenants, work with tasks and workflows.

    ratchet dev up [--state-dir DIR] [--shards N] [--detach]
    ratchet dev down | status | env
    ratchet tenants create NAME
    ratchet deploy DIR --app NAME [--allow-dropping-live-handlers]
    ratchet tasks enqueue TYPE [--payload JSON] [--delay 30s] [--key K] [--queue Q]
    ratchet tasks get|cancel|wait ID
    ratchet tasks list [--state FAILED] [--type T] [--queue Q] [--error-class C] [--since 1d] [--until T] [--all]
    ratchet tasks retry|cancel-many [filter flags] [--dry-run] [--wait SECONDS]
    ratchet operations get|cancel|wait ID
    ratchet schedules create CRON TYPE [--payload JSON] [--timezone TZ] [--overlap skip] [--catchup-window 10m]
    ratchet schedules get|list|pause|resume|delete|trigger [ID]
    ratchet breakers list | reset TYPE
    ratchet workflows start TYPE [INPUT_JSON] [--key K] [--delay 30s] [--queue Q]
    ratchet workflows get ID [--page-size N] [--page-token T | --all-steps]
    ratchet workflows children ID POSITION [--page-size N] [--page-token T | --all]
    ratchet workflows cancel ID
    ratchet workflows list [--state WAITING] [--type T] [--page-size N] [--page-token T | --all]
    ratchet events send NAME [DATA_JSON] [--workflow ID]

Commands find the platform from --state-dir, else RATCHET_ENDPOINT and
RATCHET_API_KEY (RATCHET_ADMIN_KEY for tenants), else ./.ratchet.
Failures print one line starting with "error:" and exit 1.
"""

from __future__ import annotations

import os

# `ratchet dev up` forks Postgres and the services from a process that talks
# gRPC; gRPC's fork handlers can block fork() forever there. Set before grpc loads.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import argparse
import pathlib
import sys

from ratchet.cli import bulk, schedules, workflows
from ratchet.cli.args import state_dir_arg as _state_dir_arg
from ratchet.cli.discovery import DEFAULT_STATE_DIR, discover
from ratchet.cli.errors import CLIError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ratchet", description="Ratchet: durable background tasks and workflows.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_dev(sub)
    tenants = sub.add_parser("tenants", help="create tenants (admin key)").add_subparsers(
        dest="tenants_command", required=True, metavar="create")
    create = tenants.add_parser("create", help="create a tenant with app `default`; prints its API key")
    create.add_argument("name")
    _state_dir_arg(create, None)

    deploy = sub.add_parser("deploy", help="package an app folder and make it the app's active version")
    deploy.add_argument("app_dir", metavar="DIR")
    deploy.add_argument("--app", default="default", help="app name (default: default)")
    deploy.add_argument("--module", help="handler module (default: ratchet.toml's module, else app)")
    deploy.add_argument("--allow-dropping-live-handlers", action="store_true",
                        help="deploy even if it drops handlers that live tasks or workflow runs (queued, "
                             "running, retrying, waiting) still use; without it such a deploy is refused, "
                             "naming them and their counts. With it, those tasks and runs fail with "
                             "UnknownTaskType when they next run")
    _state_dir_arg(deploy, None)
    _add_tasks(sub)
    bulk.add_commands(sub)
    schedules.add_commands(sub)
    workflows.add_commands(sub)
    return parser


def _add_dev(sub) -> None:
    dev = sub.add_parser("dev", help="run a local platform").add_subparsers(dest="dev_command", required=True,
                                                                           metavar="up|down|status|env")
    up = dev.add_parser("up", help="start Postgres and every service")
    _state_dir_arg(up, DEFAULT_STATE_DIR)
    up.add_argument("--shards", type=int, default=4, help="number of shard databases (default 4)")
    up.add_argument("--detach", action="store_true", help="return once everything is SERVING")
    up.add_argument("--options", help=argparse.SUPPRESS)  # JSON of LocalPlatform options, for tests
    for name, text in (("down", "stop everything `dev up` started"), ("status", "health of every part"),
                       ("env", "shell exports: eval \"$(ratchet dev env)\"")):
        p = dev.add_parser(name, help=text)
        _state_dir_arg(p, DEFAULT_STATE_DIR)
        if name == "status":
            p.add_argument("--json", action="store_true", help="print JSON")


def _add_tasks(sub) -> None:
    tasks = sub.add_parser("tasks", help="enqueue, inspect, search and bulk-retry tasks").add_subparsers(
        dest="tasks_command", required=True, metavar="enqueue|get|cancel|wait|list|retry|cancel-many")
    enq = tasks.add_parser("enqueue", help="enqueue a task; prints its id")
    enq.add_argument("task_type", metavar="TYPE")
    enq.add_argument("--payload", help="JSON payload")
    when = enq.add_mutually_exclusive_group()
    when.add_argument("--delay", help="run after this long, e.g. 30s, 5m")
    when.add_argument("--run-at", help="run no earlier than this ISO 8601 time")
    enq.add_argument("--key", help="idempotency key (default: a fresh one)")
    enq.add_argument("--queue", help="queue (default: default)")
    enq.add_argument("--wait", type=float, metavar="SECONDS", help="wait for the result")
    _state_dir_arg(enq, None)
    for name, text in (("get", "show a task"), ("cancel", "cancel a task"),
                       ("wait", "wait until a task is finished (exit 2 unless SUCCEEDED)")):
        p = tasks.add_parser(name, help=text)
        p.add_argument("task_id", metavar="ID")
        if name == "wait":
            p.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
        _state_dir_arg(p, None)
    bulk.add_task_commands(tasks)


def run(args: argparse.Namespace) -> int:
    from ratchet.cli import commands, dev
    if args.command == "dev":
        state_dir = pathlib.Path(args.state_dir).resolve()
        if args.dev_command == "up":
            if not 1 <= args.shards <= 64:
                raise CLIError("--shards must be between 1 and 64")
            return dev.up(state_dir, args.shards, args.detach, args.options)
        if args.dev_command == "down":
            return dev.down(state_dir)
        if args.dev_command == "status":
            return dev.status(state_dir, as_json=args.json)
        return dev.env(state_dir)
    target = discover(args.state_dir)
    if getattr(args, "func", None) is not None:
        return args.func(target, args)
    if args.command == "tenants":
        return commands.tenants_create(target, args.name)
    if args.command == "deploy":
        return commands.deploy(target, args.app_dir, args.app, args.module, args.allow_dropping_live_handlers)
    if args.tasks_command == "enqueue":
        return commands.tasks_enqueue(target, args.task_type, args.payload, args.delay, args.run_at,
                                      args.key, args.queue, args.wait)
    if args.tasks_command == "get":
        return commands.tasks_get(target, args.task_id)
    if args.tasks_command == "cancel":
        return commands.tasks_cancel(target, args.task_id)
    return commands.tasks_wait(target, args.task_id, args.timeout)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from ratchet.client import RatchetError
    try:
        return run(args)
    except CLIError as e:
        print(f"error: {e}", file=sys.stderr)
    except RatchetError as e:
        hint = " (is the platform running? try `ratchet dev status`)" if e.code == "UNAVAILABLE" else ""
        print(f"error: {e.code}: {e.message}{hint}", file=sys.stderr)
    except TimeoutError as e:
        print(f"error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
