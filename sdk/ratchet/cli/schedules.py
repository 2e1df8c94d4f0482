"""`ratchet schedules create|get|list|pause|resume|delete|trigger` and
`ratchet breakers list|reset TYPE`. Each prints JSON on stdout."""

from __future__ import annotations

import argparse
from typing import Any

from ratchet.cli.args import emit, parse_payload, state_dir_arg
from ratchet.cli.discovery import Target
from ratchet.models import OVERLAP_POLICIES


def add_commands(sub: Any) -> None:
    """Add `ratchet schedules ...` and `ratchet breakers ...`."""
    sch = sub.add_parser("schedules", help="cron schedules that enqueue tasks").add_subparsers(
        dest="schedules_command", required=True, metavar="create|get|list|pause|resume|delete|trigger")
    create = sch.add_parser("create", help="create a schedule; prints it with its id and next firing")
    create.add_argument("cron", metavar="CRON", help="5 fields (or 6 with seconds first), quoted: '*/5 * * * *'")
    create.add_argument("task_type", metavar="TYPE")
    create.add_argument("--payload", help="JSON payload of every task")
    create.add_argument("--timezone", default="UTC", help="IANA time zone the expression is read in (default UTC)")
    create.add_argument("--queue", help="queue (default: default)")
    create.add_argument("--overlap", default="allow", choices=OVERLAP_POLICIES,
                        help="when the previous task still runs (default allow)")
    create.add_argument("--catchup-window", help="after downtime, fire the latest missed slot if this recent, "
                                                 "e.g. 10m (default: no catch-up)")
    create.add_argument("--request-id", help="makes the command safe to repeat (default: a fresh one)")
    state_dir_arg(create)
    create.set_defaults(func=schedules_create)
    ls = sch.add_parser("list", help="every schedule of the app")
    state_dir_arg(ls)
    ls.set_defaults(func=schedules_list)
    for name, func, text in (("get", schedules_get, "show a schedule"),
                             ("pause", schedules_pause, "stop firing until resumed"),
                             ("resume", schedules_resume, "fire again from the next slot"),
                             ("delete", schedules_delete, "delete (tasks already enqueued are kept)"),
                             ("trigger", schedules_trigger, "fire once now")):
        p = sch.add_parser(name, help=text)
        p.add_argument("schedule_id", metavar="ID")
        state_dir_arg(p)
        p.set_defaults(func=func)

    brk = sub.add_parser("breakers", help="circuit breakers per task type").add_subparsers(
        dest="breakers_command", required=True, metavar="list|reset")
    p = brk.add_parser("list", help="breakers that are open, half-open or counting crashes")
    state_dir_arg(p)
    p.set_defaults(func=breakers_list)
    p = brk.add_parser("reset", help="close a breaker now and resume its task type")
    p.add_argument("task_type", metavar="TYPE")
    state_dir_arg(p)
    p.set_defaults(func=breakers_reset)


def _client(target: Target) -> Any:
    from ratchet.client import Client  # gRPC loads only when a command runs

    return Client(target.grpc, target.need_api_key())


def schedules_create(target: Target, args: argparse.Namespace) -> int:
    payload = parse_payload(args.payload)
    with _client(target) as client:
        emit(client.create_schedule(args.cron, args.task_type, payload, timezone=args.timezone, queue=args.queue,
                                    overlap_policy=args.overlap, catchup_window=args.catchup_window,
                                    request_id=args.request_id).to_dict())
    return 0


def schedules_list(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        emit({"schedules": [s.to_dict() for s in client.iter_schedules()]})
    return 0


def schedules_get(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        emit(client.get_schedule(args.schedule_id).to_dict())
    return 0


def schedules_pause(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        emit(client.pause_schedule(args.schedule_id).to_dict())
    return 0


def schedules_resume(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        emit(client.resume_schedule(args.schedule_id).to_dict())
    return 0


def schedules_delete(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        client.delete_schedule(args.schedule_id)
    emit({"schedule_id": args.schedule_id, "deleted": True})
    return 0


def schedules_trigger(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        emit({"schedule_id": args.schedule_id, **client.trigger_schedule(args.schedule_id).to_dict()})
    return 0


def breakers_list(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        emit({"breakers": [b.to_dict() for b in client.list_breakers()]})
    return 0


def breakers_reset(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        emit(client.reset_breaker(args.task_type).to_dict())
    return 0
