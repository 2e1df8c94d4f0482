"""ControlService.StartChildren: the children of a workflow's fan-out (ctx.parallel,
ctx.child), created on the gateway's one enqueue path (docs/design/workflows-protocol.md,
"Fan-out").

A host agent calls it for the run it holds a lease on, with the ids history minted at the
step's BEGIN and the specs the workflow's code named. Everything is checked before anything
is sent, so a refusal writes nothing:

- the ids must be exactly `child_id(parent, position, index, spread)` (spread above 1,000
  children): the sandbox names handlers and inputs, never ids, so it cannot make a "child"
  of a task that exists already or of another run;
- each child's type must be a handler (task or workflow) of the app's active deployment, and
  its payload one JSON value within the enqueue limit;
- the parent must be a run of the tenant (one GetTask, at the same time as the deployment
  lookup), not ended.

Then the children are one enqueue call: each takes its type's policy as any enqueue of it
would, routed by its id (one shard for a fan-out of up to 1,000, which lives in the parent's
slot; spread over the shards above), batched per shard, each with NewTask.parent. A child
that exists already (a resent call) counts as existing: `created` is how many are new. A
shard that fails after others created theirs leaves only what a resend creates again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.gateway.v1 import control_pb2
from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.fastcheck import first_bad_json
from ratchet.libs.rpc.errors import FailedPrecondition, InvalidArgument, NotFound, TooLarge
from ratchet.libs.shardmap import ShardMap, child_id, parse_task_id
from ratchet.services.gateway import enqueue, validation
from ratchet.services.gateway.auth import Principal
from ratchet.services.gateway.deployments import Deployments, Handlers
from ratchet.services.gateway.history_client import HistoryClient
from ratchet.services.gateway.validation import DEFAULT_QUEUE

MAX_CHILDREN = 10_000
# A fan-out of more children than this spreads them over the shards (their ids' slots);
# up to it, they share the parent's slot and shard.
SPREAD_ABOVE = 1000
# Children per enqueue call (the public batch limit, and history's per request).
CREATE_CALL = 1000
_TERMINAL = frozenset({tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_FAILED, tasks_pb2.TASK_STATE_CANCELED,
                       tasks_pb2.TASK_STATE_EXPIRED})


def child_ids(parent_id: str, position: int, n: int) -> list[str]:
    """The ids history mints for the n children of the fan-out at (parent, position)."""
    spread = n > SPREAD_ABOVE
    return [child_id(parent_id, position, i, spread) for i in range(n)]


def check_request(req: control_pb2.StartChildrenRequest) -> str:
    """The parent's canonical id, once the call's shape is right (INVALID_ARGUMENT saying what
    to fix otherwise)."""
    for name in ("tenant_id", "app_id", "parent_id"):
        if not getattr(req, name):
            raise InvalidArgument(f"{name} is required")
    parent = parse_task_id(req.parent_id)
    if parent is None:
        raise InvalidArgument(f"parent_id {req.parent_id[:80]!r} is not a Ratchet task id (the run the lease names)")
    if req.position < 0:
        raise InvalidArgument(f"position must be >= 0 (the fan-out's position in the run's step log), "
                              f"got {req.position}")
    n = len(req.children)
    if not 1 <= n <= MAX_CHILDREN:
        raise InvalidArgument(f"children holds {n} specs; a fan-out has 1..{MAX_CHILDREN} children")
    if len(req.child_ids) != n:
        raise InvalidArgument(f"child_ids holds {len(req.child_ids)} ids for {n} children: send the ids the "
                              f"step's BEGIN answered, one per child, in order")
    return parent


def check_ids(req: control_pb2.StartChildrenRequest, parent: str) -> list[str]:
    """The children's ids, which must be the ones history minted for (parent, position)."""
    expected = child_ids(parent, req.position, len(req.children))
    given = list(req.child_ids)
    if given != expected:
        i = next(i for i, (a, b) in enumerate(zip(given, expected, strict=True)) if a != b)
        raise InvalidArgument(f"child_ids[{i}] {given[i][:80]!r} is not the id of child {i} of the fan-out at "
                              f"position {req.position} of {parent}: send the child_ids the step's BEGIN answered "
                              f"({expected[i]})")
    return expected


def check_types(specs: Any, handlers: Handlers | None) -> list[str]:
    """Each child's task_type, a handler (a task or a workflow) of the active deployment;
    INVALID_ARGUMENT naming the first child whose type is not."""
    types = [s.task_type for s in specs]
    known = handlers or {}
    if handlers is not None and all(t in known for t in set(types)):
        return types
    i = next((i for i, t in enumerate(types) if t not in known), 0)
    validation.handler_for(types[i], handlers, f"children[{i}].")  # (raises, naming the registered types)
    raise AssertionError("unreachable")  # pragma: no cover


def check_payloads(specs: Any, max_payload_bytes: int) -> tuple[list[bytes], list[int]]:
    """(payloads, sizes): each child's input as JSON text (b"null" when none), within the
    limit; INVALID_ARGUMENT / RESOURCE_EXHAUSTED naming the first bad child."""
    payloads = [s.payload_json for s in specs]
    sizes = list(map(len, payloads))
    if max(sizes) > max_payload_bytes:
        i = next(i for i, k in enumerate(sizes) if k > max_payload_bytes)
        raise TooLarge(f"children[{i}].payload_json is {sizes[i]} bytes; the limit is {max_payload_bytes} bytes: "
                       f"pass a reference to large data as the child's input")
    present = payloads if 0 not in sizes else [p for p in payloads if p]
    if present and first_bad_json(present) != -1:
        for i, p in enumerate(payloads):
            if not p:
                continue
            try:
                text = p.decode()
            except UnicodeDecodeError:
                raise InvalidArgument(f"children[{i}].payload_json is not UTF-8 text: send the input as JSON") from None
            validation.check_json_text(text, f"children[{i}].payload_json")
    if 0 in sizes:
        payloads = [p or b"null" for p in payloads]
    return payloads, sizes


def form(p: Principal, parent: str, position: int, ids: list[str], types: list[str], payloads: list[bytes],
         sizes: list[int], handlers: Handlers, first: int = 0) -> enqueue.Tasks:
    """The children first.. as one enqueue call: each type's policy resolved as for an enqueue
    of it without overrides (one type: shared, with its wire form), and each child's parent
    link (its index in the whole fan-out)."""
    shared: dict[str, Any] = {"tenant_id": p.tenant_id, "app_id": p.app_id, "queue": DEFAULT_QUEUE}
    columns: dict[str, list] = {"parent": [history_pb2.ChildOf(parent_id=parent, position=position, index=first + i)
                                           for i in range(len(ids))]}
    distinct = set(types)
    policies = {t: handlers[t].resolve(where=f"children[{types.index(t)}].retry") for t in distinct}
    wire = None
    if len(distinct) == 1:
        (t,) = distinct
        retry, timeouts, wire = policies[t]
        shared.update(task_type=t, retry=retry, timeouts=timeouts)
        if retry.non_retryable:
            shared["non_retryable"] = list(retry.non_retryable)
    else:
        of = [policies[t] for t in types]
        columns.update(task_type=types, retry=[r for r, _, _ in of], timeouts=[o for _, o, _ in of],
                       non_retryable=[list(r.non_retryable) for r, _, _ in of])
    return enqueue.Tasks(ids=ids, payloads=payloads, sizes=sizes, shared=shared, columns=columns,
                         where="children[{i}].", wire=wire)


class ChildrenApi:
    """StartChildren for host agents (authorized by their mesh token before this is called)."""

    def __init__(self, creates: enqueue.Creates, history: HistoryClient, shard_map: ShardMap,
                 deployments: Deployments, max_payload_bytes: int):
        self.creates, self.history, self.shard_map = creates, history, shard_map
        self.deployments, self.max_payload_bytes = deployments, max_payload_bytes

    async def start(self, req: control_pb2.StartChildrenRequest,
                    timeout: float) -> control_pb2.StartChildrenResponse:
        """Check everything, then create the children on the one enqueue path."""
        parent = check_request(req)
        ids = check_ids(req, parent)
        payloads, sizes = check_payloads(req.children, self.max_payload_bytes)
        (owner, handlers), task = await asyncio.gather(self.deployments.owner_and_handlers(req.app_id),
                                                       self._parent(req.tenant_id, parent, timeout))
        if owner is not None and owner != req.tenant_id:
            raise InvalidArgument(f"app {req.app_id[:64]} does not belong to tenant {req.tenant_id[:64]}")
        types = check_types(req.children, handlers)
        assert handlers is not None  # (check_types refuses an app without a deployment)
        self._check_parent(task, handlers, parent)
        p = Principal(req.tenant_id, req.app_id, "")
        # In calls of at most CREATE_CALL children, as a batch enqueue is: history takes at most
        # that many per request, and a spread fan-out's call of 1,000 spans the shards.
        calls = [form(p, parent, req.position, ids[k:k + CREATE_CALL], types[k:k + CREATE_CALL],
                      payloads[k:k + CREATE_CALL], sizes[k:k + CREATE_CALL], handlers, first=k)
                 for k in range(0, len(ids), CREATE_CALL)]
        outcomes = await asyncio.gather(*(self.creates.create(c, timeout) for c in calls), return_exceptions=True)
        for o in outcomes:  # (every call has ended: none is left running behind the answer)
            if isinstance(o, BaseException):
                raise o
        existing = sum(sum(d.deduplicated) for d in outcomes if isinstance(d, enqueue.Created) and d.deduplicated)
        return control_pb2.StartChildrenResponse(created=len(ids) - existing)

    async def _parent(self, tenant_id: str, parent: str, timeout: float) -> tasks_pb2.Task:
        try:
            resp = await self.history.get_task(self.shard_map.shard_for_task(parent), parent, tenant_id, timeout)
        except NotFound:
            raise NotFound(f"parent run {parent} not found for tenant {tenant_id[:64]}") from None
        return resp.task

    @staticmethod
    def _check_parent(task: tasks_pb2.Task, handlers: Handlers, parent: str) -> None:
        """The parent is a run of a workflow handler that has not ended (children of an ended
        run would never be waited for)."""
        h = handlers.get(task.task_type)
        if h is None or not h.workflow:
            raise InvalidArgument(f"parent {parent} is a task of type {task.task_type!r}, not a workflow run: only a "
                                  f"workflow fans out")
        if task.state in _TERMINAL:
            raise FailedPrecondition(f"parent run {parent} has ended ({tasks_pb2.TaskState.Name(task.state)}); "
                                     f"its fan-out starts no children")
