"""`ratchet tasks list|retry|cancel-many` and `ratchet operations get|cancel|wait`:
search dead letters and run bulk operations.

Each prints JSON on stdout. `operations wait` (and `--wait`) exit 2 unless
the operation SUCCEEDED (processed every item; see its failures).
"""

from __future__ import annotations

import argparse
from typing import Any

from ratchet.cli.args import EXIT_NOT_SUCCEEDED, emit, filter_args, state_dir_arg
from ratchet.cli.discovery import Target
from ratchet.cli.errors import CLIError


def add_task_commands(tasks: Any) -> None:
    """Add list, retry and cancel-many to `ratchet tasks`."""
    ls = tasks.add_parser("list", help="search tasks, newest first (FAILED = dead letters)")
    filter_args(ls, "one state, e.g. FAILED")
    ls.add_argument("--page-size", type=int, help="tasks per page, 1..500 (default 100)")
    ls.add_argument("--page-token", help="next_page_token of the previous page")
    ls.add_argument("--all", action="store_true", help="follow every page")
    state_dir_arg(ls)
    ls.set_defaults(func=tasks_list)
    for name, func, text, states in (
            ("retry", tasks_retry, "retry matching terminal tasks as new tasks (a background operation)",
             "FAILED, CANCELED or EXPIRED; repeatable (default FAILED)"),
            ("cancel-many", tasks_cancel_many, "cancel matching unfinished tasks (a background operation)",
             "ENQUEUED, LEASED or RETRY_WAIT; repeatable (default all three)")):
        p = tasks.add_parser(name, help=text)
        filter_args(p, states)
        p.add_argument("--dry-run", action="store_true", help="only count what matches")
        p.add_argument("--request-id", help="makes the command safe to repeat (default: a fresh one)")
        p.add_argument("--wait", type=float, metavar="SECONDS", help="wait for the operation to finish")
        state_dir_arg(p)
        p.set_defaults(func=func)


def add_commands(sub: Any) -> None:
    """Add `ratchet operations get|cancel|wait`."""
    ops = sub.add_parser("operations", help="follow or stop bulk operations").add_subparsers(
        dest="operations_command", required=True, metavar="get|cancel|wait")
    for name, func, text in (("get", operations_get, "show an operation's progress and failures"),
                             ("cancel", operations_cancel, "stop a running operation"),
                             ("wait", operations_wait, "wait until it finishes (exit 2 unless SUCCEEDED)")):
        p = ops.add_parser(name, help=text)
        p.add_argument("operation_id", metavar="ID")
        if name == "wait":
            p.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")
        state_dir_arg(p)
        p.set_defaults(func=func)


def _client(target: Target) -> Any:
    from ratchet.client import Client  # gRPC loads only when a command runs

    return Client(target.grpc, target.need_api_key())


def _filter(args: argparse.Namespace) -> dict:
    return dict(state=args.state, task_type=args.task_type, queue=args.queue, error_class=args.error_class,
                since=args.since, until=args.until)


def tasks_list(target: Target, args: argparse.Namespace) -> int:
    filt = _filter(args)
    if filt["state"] and len(filt["state"]) > 1:
        raise CLIError("tasks list takes one --state; run it once per state")
    filt["state"] = filt["state"][0] if filt["state"] else None
    if args.page_size is not None and not 1 <= args.page_size <= 500:
        raise CLIError("--page-size must be between 1 and 500")
    with _client(target) as client:
        if args.all:
            if args.page_token:
                raise CLIError("give --all or --page-token, not both")
            tasks = list(client.iter_tasks(**filt, page_size=args.page_size))
            emit({"tasks": [t.to_dict() for t in tasks], "next_page_token": None})
            return 0
        page = client.list_tasks(**filt, page_size=args.page_size, page_token=args.page_token)
    emit(page.to_dict())
    return 0


def _bulk(target: Target, args: argparse.Namespace, retry: bool) -> int:
    with _client(target) as client:
        call = client.retry_tasks if retry else client.cancel_tasks
        result = call(**_filter(args), dry_run=args.dry_run, request_id=args.request_id)
        if args.wait is None or result.operation is None:
            emit(result.to_dict())
            return 0
        return _print_final(client.wait_operation(result.operation.operation_id, timeout=args.wait))


def tasks_retry(target: Target, args: argparse.Namespace) -> int:
    return _bulk(target, args, retry=True)


def tasks_cancel_many(target: Target, args: argparse.Namespace) -> int:
    return _bulk(target, args, retry=False)


def operations_get(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        emit(client.get_operation(args.operation_id).to_dict())
    return 0


def operations_cancel(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        emit(client.cancel_operation(args.operation_id).to_dict())
    return 0


def operations_wait(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        return _print_final(client.wait_operation(args.operation_id, timeout=args.timeout))


def _print_final(op: Any) -> int:
    emit(op.to_dict())
    return 0 if op.state == "SUCCEEDED" else EXIT_NOT_SUCCEEDED
