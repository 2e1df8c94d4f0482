"""Bulk retry and bulk cancel: durable operations that run on every shard.

The gateway checks the filter, mints the operation id, starts the operation's
part on every shard (history's StartBulkOperation is idempotent per id), and
answers with the parts aggregated. The id is "op_" + a hash of (tenant, app,
request_id), so a retried request finds the same operation on every shard
(and completes a start that a down shard interrupted); without a request_id
it is random. A request_id reused for a different kind or filter is refused
with ALREADY_EXISTS naming the operation, like a reused idempotency key.

Aggregation (Get/Cancel too): counts are sums; RUNNING while any part runs,
else CANCELED if any part was cancelled, else SUCCEEDED; failures are each
part's (oldest first) concatenated in shard order, the first 1,000.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.rpc.errors import AlreadyExists, DeadlineExceeded, InvalidArgument, NotFound, Unavailable
from ratchet.services.gateway import filters
from ratchet.services.gateway.auth import Principal
from ratchet.services.gateway.deployments import Deployments
from ratchet.services.gateway.fanout import each_shard
from ratchet.services.gateway.history_client import HistoryClient

S = tasks_pb2
OPERATION_ID = re.compile(r"^op_[0-9a-f]{32}$")
MAX_FAILURES = 1000
_REQUEST_ID = re.compile(r"^[\x20-\x7e]{1,200}$")
_COUNTS = ("matched", "processed", "succeeded", "failed", "skipped")


def operation_id(tenant_id: str, app_id: str, request_id: str) -> str:
    """Deterministic for a request_id (scoped to the app), random without one."""
    if not request_id:
        return "op_" + secrets.token_hex(16)
    digest = hashlib.sha256("\0".join((tenant_id, app_id, request_id)).encode()).hexdigest()
    return "op_" + digest[:32]


def check_request_id(request_id: str) -> None:
    if request_id and not _REQUEST_ID.match(request_id):
        raise InvalidArgument(f"request_id must be 1..200 printable ASCII characters (got {len(request_id)} "
                              f"characters)")


def aggregate(op_id: str, parts: list[tasks_pb2.BulkOperation]) -> tasks_pb2.BulkOperation:
    """One operation from its per-shard parts (given in shard order)."""
    out = tasks_pb2.BulkOperation(operation_id=op_id, kind=parts[0].kind)
    out.filter.CopyFrom(parts[0].filter)
    states = {p.state for p in parts}
    if S.BULK_OPERATION_STATE_RUNNING in states or S.BULK_OPERATION_STATE_UNSPECIFIED in states:
        out.state = S.BULK_OPERATION_STATE_RUNNING
    elif S.BULK_OPERATION_STATE_CANCELED in states:
        out.state = S.BULK_OPERATION_STATE_CANCELED
    else:
        out.state = S.BULK_OPERATION_STATE_SUCCEEDED
    for name in _COUNTS:
        setattr(out, name, sum(getattr(p, name) for p in parts))
    for p in parts:
        room = MAX_FAILURES - len(out.failures)
        if room <= 0:
            break
        out.failures.extend(p.failures[:room])
    created = [p.created_at for p in parts if p.HasField("created_at")]
    if created:
        out.created_at.CopyFrom(min(created, key=lambda t: (t.seconds, t.nanos)))
    finished = [p.finished_at for p in parts if p.HasField("finished_at")]
    if out.state != S.BULK_OPERATION_STATE_RUNNING and len(finished) == len(parts):
        out.finished_at.CopyFrom(max(finished, key=lambda t: (t.seconds, t.nanos)))
    return out


class BulkApi:
    """RetryTasks, CancelTasks, GetBulkOperation, CancelBulkOperation for an authenticated app."""

    def __init__(self, history: HistoryClient, shard_ids: list[int], deployments: Deployments):
        self.history = history
        self.shard_ids = sorted(shard_ids)
        self.deployments = deployments

    async def retry(self, p: Principal, req: tasks_pb2.RetryTasksRequest,
                    timeout: float) -> tasks_pb2.RetryTasksResponse:
        matched, op = await self._run(p, S.BULK_OPERATION_KIND_RETRY, req, timeout)
        return tasks_pb2.RetryTasksResponse(matched=matched, operation=op)

    async def cancel_tasks(self, p: Principal, req: tasks_pb2.CancelTasksRequest,
                           timeout: float) -> tasks_pb2.CancelTasksResponse:
        matched, op = await self._run(p, S.BULK_OPERATION_KIND_CANCEL, req, timeout)
        return tasks_pb2.CancelTasksResponse(matched=matched, operation=op)

    async def _run(self, p: Principal, kind: int, req, timeout: float
                   ) -> tuple[int, tasks_pb2.BulkOperation | None]:
        f = filters.bulk_filter(req.filter, kind)
        check_request_id(req.request_id)
        if req.dry_run:
            counts = await each_shard(self.shard_ids, lambda s: self.history.count_tasks(
                history_pb2.CountTasksRequest(shard_id=s, tenant_id=p.tenant_id, app_id=p.app_id, filter=f),
                timeout))
            return sum(counts.values()), None
        registered: list[str] = []
        if kind == S.BULK_OPERATION_KIND_RETRY:
            handlers = await self.deployments.handlers_for(p.app_id)
            if handlers is None:
                raise InvalidArgument("the app has no deployment, so nothing could be retried: deploy the app "
                                      "first (`ratchet deploy DIR --app NAME`)")
            registered = sorted(handlers)
        op_id = operation_id(p.tenant_id, p.app_id, req.request_id)
        op = await self._start(history_pb2.StartBulkOperationRequest(
            operation_id=op_id, tenant_id=p.tenant_id, app_id=p.app_id, kind=kind, filter=f,
            registered_task_types=registered), bool(req.request_id), timeout)
        if op.kind != kind or not filters.same_filter(op.filter, f):
            raise AlreadyExists(f"request_id {req.request_id!r} was already used for a different bulk operation "
                                f"({op_id}); repeat the original request or use a new request_id",
                                operation_id=op_id)
        return op.matched, op

    async def _start(self, start: history_pb2.StartBulkOperationRequest, keyed: bool,
                     timeout: float) -> tasks_pb2.BulkOperation:
        """Start the operation's part on every shard; the parts aggregated."""
        async def one(shard: int) -> tasks_pb2.BulkOperation:
            msg = history_pb2.StartBulkOperationRequest()
            msg.CopyFrom(start)
            msg.shard_id = shard
            return await self.history.start_bulk(msg, timeout)

        op_id = start.operation_id
        try:
            parts = await each_shard(self.shard_ids, one)
        except (Unavailable, DeadlineExceeded) as e:
            e.fields.setdefault("operation_id", op_id)
            e.message += f"; operation {op_id} may have started on the other shards: " + (
                "repeat the request with the same request_id to start it everywhere" if keyed else
                "send a request_id to make repeating the request safe")
            raise
        return aggregate(op_id, [parts[s] for s in self.shard_ids])

    async def _parts(self, p: Principal, op_id: str, call, timeout: float) -> tasks_pb2.BulkOperation:
        if not op_id:
            raise InvalidArgument("operation_id is required (as returned by RetryTasks or CancelTasks)")
        missing = NotFound(f"bulk operation {op_id[:80]} not found")
        if not OPERATION_ID.match(op_id):
            raise missing
        found = await each_shard(self.shard_ids, lambda s: call(s, op_id, p.tenant_id, timeout), missing_ok=True)
        # A shard that lacks its part was down when the operation started; the others still tell the story.
        parts = [found[s] for s in self.shard_ids if found.get(s) is not None]
        if not parts:
            raise missing
        return aggregate(op_id, parts)

    async def get(self, p: Principal, req: tasks_pb2.GetBulkOperationRequest,
                  timeout: float) -> tasks_pb2.GetBulkOperationResponse:
        op = await self._parts(p, req.operation_id, self.history.get_bulk, timeout)
        return tasks_pb2.GetBulkOperationResponse(operation=op)

    async def cancel(self, p: Principal, req: tasks_pb2.CancelBulkOperationRequest,
                     timeout: float) -> tasks_pb2.CancelBulkOperationResponse:
        op = await self._parts(p, req.operation_id, self.history.cancel_bulk, timeout)
        return tasks_pb2.CancelBulkOperationResponse(operation=op)
