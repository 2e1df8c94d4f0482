"""`ratchet tenants|deploy|tasks`: the commands that talk to a running platform.

Each prints JSON on stdout so it composes with jq and scripts.
"""

from __future__ import annotations

import pathlib
from typing import Any

from google.protobuf import json_format

from ratchet.api.apps.v1 import apps_pb2
from ratchet.cli import bundle
from ratchet.cli.args import EXIT_NOT_SUCCEEDED, emit, parse_payload
from ratchet.cli.discovery import Target
from ratchet.cli.errors import CLIError
from ratchet.client import AdminClient, Client, retry_message, timeouts_message

__all__ = [
    "EXIT_NOT_SUCCEEDED",
    "deploy",
    "emit",
    "handler_messages",
    "parse_payload",
    "tasks_cancel",
    "tasks_enqueue",
    "tasks_get",
    "tasks_wait",
    "tenants_create",
]


def tenants_create(target: Target, name: str) -> int:
    with AdminClient(target.grpc, target.need_admin_key()) as admin:
        emit(admin.create_tenant(name))
    return 0


_KINDS = {"task": apps_pb2.HANDLER_KIND_TASK, "workflow": apps_pb2.HANDLER_KIND_WORKFLOW}
_RESUMES = {"latest": apps_pb2.WORKFLOW_RESUME_LATEST, "pinned": apps_pb2.WORKFLOW_RESUME_PINNED}


def _kind_fields(h: dict, msg: apps_pb2.Handler) -> None:
    """describe's "kind" ("task" when absent: an SDK before workflows) and, for a workflow,
    "resume" ("latest" when absent), as Handler.kind and Handler.resume."""
    kind = h.get("kind") or "task"
    if kind not in _KINDS:
        raise CLIError(f"handler {h['name']!r} has kind {kind!r}; this CLI knows 'task' and 'workflow' "
                       f"(upgrade the ratchet package)")
    msg.kind = _KINDS[kind]
    if kind != "workflow":
        return
    resume = h.get("resume") or "latest"
    if resume not in _RESUMES:
        raise CLIError(f"workflow {h['name']!r} has resume {resume!r}; use 'latest' or 'pinned'")
    msg.resume = _RESUMES[resume]


def handler_messages(description: dict) -> list[apps_pb2.Handler]:
    """The describe output's handlers as the wire form CreateDeployment takes
    (retry.non_retryable and retry.rules -> RetryPolicy.non_retryable and
    ErrorRule entries; non_retryable also on the Handler, where older
    gateways read it; kind and resume as Handler.kind and Handler.resume)."""
    out = []
    for h in description.get("handlers") or []:
        names = h.get("non_retryable") or (h.get("retry") or {}).get("non_retryable") or []
        msg = apps_pb2.Handler(name=h["name"], non_retryable=list(names))
        if h.get("retry"):
            msg.retry.CopyFrom(retry_message(h["retry"]))
        if h.get("timeouts"):
            msg.timeouts.CopyFrom(timeouts_message(h["timeouts"]))
        _kind_fields(h, msg)
        out.append(msg)
    if not out:
        raise CLIError("the app registers no handlers: decorate functions with @task or @workflow in app.py "
                       "(or the module named in ratchet.toml)")
    return out


def deploy(target: Target, app_dir: str, app: str, module: str | None,
           allow_dropping_live_handlers: bool = False) -> int:
    """Package, describe and deploy; a preflight refusal (handlers dropped under live tasks)
    is printed by main as one FAILED_PRECONDITION line naming them, and exits 1."""
    data = bundle.package(pathlib.Path(app_dir))
    description = bundle.describe(data, module)
    handlers = handler_messages(description)
    with Client(target.grpc, target.need_api_key(), timeout=60.0) as client:
        dep = client.create_deployment(app, data, bundle.digest(data),
                                       description.get("module") or module or "app", handlers,
                                       allow_dropping_live_handlers=allow_dropping_live_handlers)
    out = json_format.MessageToDict(dep, preserving_proto_field_name=True,
                                    always_print_fields_with_no_presence=True)
    out["bundle_bytes"] = len(data)
    emit(out)
    return 0


def tasks_enqueue(target: Target, task_type: str, payload: str | None, delay: str | None,
                  run_at: str | None, key: str | None, queue: str | None, wait: float | None) -> int:
    with Client(target.grpc, target.need_api_key()) as client:
        task_id = client.enqueue(task_type, parse_payload(payload), queue=queue, delay=delay, run_at=run_at,
                                 idempotency_key=key)
        if wait is None:
            emit({"task_id": task_id})
            return 0
        return _print_final(client.wait(task_id, timeout=wait))


def tasks_get(target: Target, task_id: str) -> int:
    with Client(target.grpc, target.need_api_key()) as client:
        emit(client.get(task_id).to_dict())
    return 0


def tasks_cancel(target: Target, task_id: str) -> int:
    with Client(target.grpc, target.need_api_key()) as client:
        emit({"task_id": task_id, "state": client.cancel(task_id)})
    return 0


def tasks_wait(target: Target, task_id: str, timeout: float) -> int:
    with Client(target.grpc, target.need_api_key()) as client:
        return _print_final(client.wait(task_id, timeout=timeout))


def _print_final(info: Any) -> int:
    emit(info.to_dict())
    return 0 if info.succeeded else EXIT_NOT_SUCCEEDED
