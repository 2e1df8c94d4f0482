"""`ratchet workflows start|get|children|cancel|list` and `ratchet events send`: workflow runs,
their fan-outs' children and the events they wait for. Each prints JSON on stdout."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ratchet.cli.args import emit, state_dir_arg
from ratchet.cli.discovery import Target
from ratchet.cli.errors import CLIError

MAX_PAGE = 1000


def add_commands(sub: Any) -> None:
    """Add `ratchet workflows ...` and `ratchet events send`."""
    wf = sub.add_parser("workflows", help="start, inspect and cancel workflow runs").add_subparsers(
        dest="workflows_command", required=True, metavar="start|get|children|cancel|list")
    start = wf.add_parser("start", help="start a run of a @workflow handler; prints its id")
    start.add_argument("workflow_type", metavar="TYPE")
    start.add_argument("input_json", metavar="INPUT", nargs="?", help="JSON input of the run (or --input)")
    start.add_argument("--input", help="JSON input of the run")
    start.add_argument("--key", help="idempotency key: the same start again returns the same run "
                                     "(default: a fresh one)")
    start.add_argument("--delay", help="start after this long, e.g. 30s, 5m")
    start.add_argument("--queue", help="queue (default: default)")
    state_dir_arg(start)
    start.set_defaults(func=workflows_start)
    get = wf.add_parser("get", help="show a run, its step log (a fan-out's child_count and children_done) "
                                    "and what it waits for")
    get.add_argument("workflow_id", metavar="ID")
    get.add_argument("--page-size", type=int, help=f"steps per page, 1..{MAX_PAGE} (default 100)")
    get.add_argument("--page-token", help="next_step_page_token of the previous page")
    get.add_argument("--all-steps", action="store_true", help="follow every page of the step log")
    state_dir_arg(get)
    get.set_defaults(func=workflows_get)
    kids = wf.add_parser("children", help="the children of the fan-out at a position of a run's step log")
    kids.add_argument("workflow_id", metavar="ID")
    kids.add_argument("position", metavar="POSITION", type=int, help="the fan-out's position (workflows get shows it)")
    kids.add_argument("--page-size", type=int, help=f"children per page, 1..{MAX_PAGE} (default 100)")
    kids.add_argument("--page-token", help="next_page_token of the previous page")
    kids.add_argument("--all", action="store_true", help="follow every page")
    state_dir_arg(kids)
    kids.set_defaults(func=workflows_children)
    cancel = wf.add_parser("cancel", help="cancel a run")
    cancel.add_argument("workflow_id", metavar="ID")
    state_dir_arg(cancel)
    cancel.set_defaults(func=workflows_cancel)
    ls = wf.add_parser("list", help="the app's runs, newest first")
    ls.add_argument("--state", help="one state, e.g. WAITING or FAILED")
    ls.add_argument("--type", dest="workflow_type", metavar="T", help="workflow type")
    ls.add_argument("--page-size", type=int, help=f"runs per page, 1..{MAX_PAGE} (default 100)")
    ls.add_argument("--page-token", help="next_page_token of the previous page")
    ls.add_argument("--all", action="store_true", help="follow every page")
    state_dir_arg(ls)
    ls.set_defaults(func=workflows_list)

    ev = sub.add_parser("events", help="send events to waiting workflow runs").add_subparsers(
        dest="events_command", required=True, metavar="send")
    send = ev.add_parser("send", help="wake the runs waiting for this event (or deliver it to one run)")
    send.add_argument("name", metavar="NAME")
    send.add_argument("data_json", metavar="DATA", nargs="?", help="JSON object: the event's data, matched "
                                                                   "against each wait's fields (or --data)")
    send.add_argument("--data", help="JSON object: the event's data")
    send.add_argument("--workflow", metavar="ID", help="deliver to this run's inbox (kept until a wait takes it)")
    state_dir_arg(send)
    send.set_defaults(func=events_send)


def _client(target: Target) -> Any:
    from ratchet.client import Client  # gRPC loads only when a command runs

    return Client(target.grpc, target.need_api_key())


def _one(positional: str | None, flag_value: str | None, flag: str) -> str | None:
    """A JSON value given as the positional argument or as its flag, not both."""
    if positional is not None and flag_value is not None:
        raise CLIError(f"give the JSON as an argument or as {flag}, not both")
    return positional if positional is not None else flag_value


def _json(text: str | None, flag: str, example: str) -> Any:
    """A JSON argument's value, or CLIError saying how to quote it."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CLIError(f"{flag} is not valid JSON ({e}); quote it, e.g. {flag} '{example}'") from None


def _page_size(value: int | None) -> None:
    if value is not None and not 1 <= value <= MAX_PAGE:
        raise CLIError(f"--page-size must be between 1 and {MAX_PAGE}")


def workflows_start(target: Target, args: argparse.Namespace) -> int:
    data = _json(_one(args.input_json, args.input, "--input"), "--input", '{"user": "ada"}')
    with _client(target) as client:
        emit({"workflow_id": client.start_workflow(args.workflow_type, data, idempotency_key=args.key,
                                                   delay=args.delay, queue=args.queue)})
    return 0


def workflows_get(target: Target, args: argparse.Namespace) -> int:
    _page_size(args.page_size)
    if args.all_steps and args.page_token:
        raise CLIError("give --all-steps or --page-token, not both")
    with _client(target) as client:
        run = client.get_workflow(args.workflow_id, args.page_size, args.page_token)
        out = run.to_dict()
        token = run.next_step_page_token if args.all_steps else None
        while token:  # (the later pages; the run's fields are the first page's)
            page = client.get_workflow(args.workflow_id, args.page_size, token)
            out["steps"] += [s.to_dict() for s in page.steps]
            token = out["next_step_page_token"] = page.next_step_page_token
    emit(out)
    return 0


def workflows_children(target: Target, args: argparse.Namespace) -> int:
    _page_size(args.page_size)
    if args.position < 0:
        raise CLIError("POSITION must be 0 or more: a fan-out's position in the run's step log (workflows get)")
    if args.all and args.page_token:
        raise CLIError("give --all or --page-token, not both")
    with _client(target) as client:
        if args.all:
            kids = list(client.iter_workflow_children(args.workflow_id, args.position, page_size=args.page_size))
            emit({"children": [c.to_dict() for c in kids], "next_page_token": None})
            return 0
        page = client.list_workflow_children(args.workflow_id, args.position, page_size=args.page_size,
                                             page_token=args.page_token)
    emit(page.to_dict())
    return 0


def workflows_cancel(target: Target, args: argparse.Namespace) -> int:
    with _client(target) as client:
        emit({"workflow_id": args.workflow_id, "state": client.cancel_workflow(args.workflow_id)})
    return 0


def workflows_list(target: Target, args: argparse.Namespace) -> int:
    _page_size(args.page_size)
    filt = dict(state=args.state, workflow_type=args.workflow_type, page_size=args.page_size)
    with _client(target) as client:
        if args.all:
            if args.page_token:
                raise CLIError("give --all or --page-token, not both")
            runs = list(client.iter_workflows(**filt))
            emit({"workflows": [w.to_dict() for w in runs], "next_page_token": None})
            return 0
        page = client.list_workflows(**filt, page_token=args.page_token)
    emit(page.to_dict())
    return 0


def events_send(target: Target, args: argparse.Namespace) -> int:
    data = _json(_one(args.data_json, args.data, "--data"), "--data", '{"user": "ada"}')
    if data is not None and not isinstance(data, dict):
        raise CLIError(f"--data must be a JSON object (the fields a wait matches on), got {type(data).__name__}")
    with _client(target) as client:
        if args.workflow:
            delivered: Any = client.send_workflow_event(args.workflow, args.name, data)
            emit({"workflow_id": args.workflow, "name": args.name, "delivered": delivered})
        else:
            emit({"name": args.name, "delivered": client.send_event(args.name, data)})
    return 0
