"""Deployments: register an app's bundle and handlers, make it active, and
answer which handlers (with their policies) an app's tasks may use."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Callable

from google.protobuf import json_format, timestamp_pb2

from ratchet.api.apps.v1 import apps_pb2
from ratchet.api.tasks.v1 import tasks_pb2
from ratchet.internal.history.v1 import history_pb2
from ratchet.libs.rpc.errors import InvalidArgument, NotFound
from ratchet.services.gateway import enqueue, policy
from ratchet.services.gateway.auth import Principal, require_app
from ratchet.services.gateway.bundles import BlobStore, check_archive, check_digest
from ratchet.services.gateway.preflight import Preflight, dropped, refusal
from ratchet.services.gateway.store import ControlStore, DeploymentRow

HANDLER_NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# Enqueues read the active handlers this often at most; a deploy through this
# gateway clears the entry at once, another replica's deploy shows within it.
HANDLER_CACHE_S = 1.0


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Registered:
    """A handler of a deployment, with the policy an enqueue of its type without overrides
    takes, resolved when the deployment is loaded: every such enqueue shares these messages
    (treat them as read-only), and a new deployment brings new ones."""

    handler: apps_pb2.Handler
    # (retry, timeouts, their wire form: enqueue.handler_wire) resolved; None when the handler's
    # policy does not merge with the defaults (cap below base), so that each enqueue of the type
    # is refused naming its own field.
    plain: tuple[tasks_pb2.RetryPolicy, tasks_pb2.Timeouts, history_pb2.NewTask] | None
    # Handler.kind is WORKFLOW: a run is started by StartWorkflow, and an enqueue of the type is
    # refused (read on every enqueue, so it is this flag, not the enum looked up per call).
    workflow: bool = False

    def resolve(self, retry: tasks_pb2.RetryPolicy | None = None, timeouts: tasks_pb2.Timeouts | None = None,
                where: str = "retry") -> tuple[tasks_pb2.RetryPolicy, tasks_pb2.Timeouts, history_pb2.NewTask | None]:
        """(retry, timeouts, wire form) of an enqueue of this type: what was resolved when the
        deployment loaded if it overrides nothing, else merged now (InvalidArgument naming `where`),
        without a wire form."""
        if retry is None and timeouts is None and self.plain is not None:
            return self.plain
        return (*policy.resolve(retry, timeouts, self.handler, where), None)


Handlers = dict[str, Registered]  # an active deployment's handlers by name


def register(handler: apps_pb2.Handler) -> Registered:
    """handler with its policy resolved for enqueues without overrides, and its kind."""
    workflow = handler.kind == apps_pb2.HANDLER_KIND_WORKFLOW
    try:
        retry, timeouts = policy.resolve(None, None, handler)
    except InvalidArgument:
        return Registered(handler, None, workflow)
    return Registered(handler, (retry, timeouts, enqueue.handler_wire(handler.name, retry, timeouts)), workflow)


def _check_kind(h: apps_pb2.Handler, where: str) -> None:
    """A known kind (unset: a task, as every deployment before workflows), and `resume` only on
    a workflow. PINNED is refused: until pinned resume exists a resumed run executes the active
    deployment, so storing it would silently make it LATEST (docs/workflows.md, "Not yet")."""
    if h.kind not in apps_pb2.HandlerKind.values():
        raise InvalidArgument(f"{where}.kind must be HANDLER_KIND_TASK or HANDLER_KIND_WORKFLOW, got {h.kind}")
    if h.resume not in apps_pb2.WorkflowResume.values():
        raise InvalidArgument(f"{where}.resume must be WORKFLOW_RESUME_LATEST (or unset), got {h.resume}")
    if h.resume == apps_pb2.WORKFLOW_RESUME_PINNED:
        raise InvalidArgument(f"{where}.resume: resume='pinned' is not available yet: a resumed run executes the "
                              f"active deployment; use resume='latest' and ctx.version() to change code under live "
                              f"runs")
    if h.kind != apps_pb2.HANDLER_KIND_WORKFLOW and h.resume != apps_pb2.WORKFLOW_RESUME_UNSPECIFIED:
        raise InvalidArgument(f"{where}.resume is set on {h.name!r}, a task handler: only a workflow resumes; "
                              f"drop resume or declare it with @workflow")


def check_handlers(handlers, module: str) -> None:
    """At least one handler, valid unique names, policies in range, a valid module."""
    if module and (len(module) > 200 or not _MODULE.match(module)):
        raise InvalidArgument(f"module must be a dotted Python module name, got {module[:80]!r}")
    if not handlers:
        raise InvalidArgument("handlers is empty: a deployment registers at least one @task or @workflow handler")
    seen = set()
    for i, h in enumerate(handlers):
        where = f"handlers[{i}]"
        if not HANDLER_NAME.match(h.name):
            raise InvalidArgument(f"{where}.name must be 1..200 characters of [A-Za-z0-9_.:-], got {h.name[:80]!r}")
        if h.name in seen:
            raise InvalidArgument(f"{where}.name {h.name!r} is registered twice")
        seen.add(h.name)
        _check_kind(h, where)
        if h.HasField("retry"):
            policy.check_retry(h.retry, f"{where}.retry")
        if h.HasField("timeouts"):
            policy.check_timeouts(h.timeouts, f"{where}.timeouts")
        for i, c in enumerate(h.non_retryable):
            policy.check_class_name(c, f"{where}.non_retryable[{i}]")
        both = sorted(set(h.non_retryable) & set(h.retry.rules))
        if both:
            raise InvalidArgument(f"{where}: {', '.join(both)} is both in non_retryable and in retry.rules; "
                                  f"keep one of them")
        policy.resolve(None, None, h, where=f"{where}.retry")


def to_message(row: DeploymentRow, app_name: str, created: bool) -> apps_pb2.Deployment:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(row.created_at)
    return apps_pb2.Deployment(app=app_name, digest=row.digest, module=row.module,
                               handlers=[json_format.ParseDict(h, apps_pb2.Handler()) for h in row.handlers],
                               created_at=ts, created=created)


class Deployments:
    """Deploys and the per-app handler lookup used by every enqueue (each handler Registered:
    its policy resolved once per deployment)."""

    def __init__(self, store: ControlStore, blobs: BlobStore, max_bundle_bytes: int,
                 monotonic: Callable[[], float] = time.monotonic, preflight: Preflight | None = None):
        self.store = store
        self.blobs = blobs
        self.max_bundle_bytes = max_bundle_bytes
        self.monotonic = monotonic
        # Without a history peer a deploy that drops handlers is refused UNAVAILABLE, never unchecked.
        self.preflight = preflight or Preflight(None, [])
        # app_id -> (expires, tenant_id, handlers, deployment_id) of its active deployment
        self._cache: dict[str, tuple[float, str | None, Handlers | None, int | None]] = {}

    async def handlers_for(self, app_id: str) -> Handlers | None:
        """The active deployment's handlers by name; None if the app never deployed."""
        return (await self.owner_and_handlers(app_id))[1]

    async def owner_and_handlers(self, app_id: str) -> tuple[str | None, Handlers | None]:
        """(tenant_id, handlers by name) of the app's active deployment; (None, None) if it never deployed.

        A deployment's handlers never change (a deploy records a new one), so a refresh that finds
        the same deployment active keeps the handlers, and their resolved policies, it had."""
        hit = self._cache.get(app_id)
        now = self.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1], hit[2]
        row = await self.store.active_deployment_get(app_id)
        if row is None:
            tenant_id, handlers, deployment_id = None, None, None
        else:
            tenant_id, deployment_id = row.tenant_id, row.deployment_id
            hit = self._cache.get(app_id)  # (another enqueue may have refreshed it meanwhile)
            if hit is not None and hit[3] == deployment_id:
                handlers = hit[2]
            else:
                handlers = {h["name"]: register(json_format.ParseDict(h, apps_pb2.Handler())) for h in row.handlers}
        self._cache[app_id] = (now + HANDLER_CACHE_S, tenant_id, handlers, deployment_id)
        return tenant_id, handlers

    async def create(self, principal: Principal, req: apps_pb2.CreateDeploymentRequest,
                     timeout: float = 10.0) -> apps_pb2.Deployment:
        """Check everything, run the preflight, store the bundle, record the deployment and activate it."""
        if not req.app:
            raise InvalidArgument("app is required (the app's name, e.g. 'default')")
        require_app(principal, req.app)
        module = req.module or "app"
        check_handlers(req.handlers, module)
        hex_digest = check_digest(req.bundle, req.digest, self.max_bundle_bytes)
        # Inflating a bundle of up to max_bundle_bytes must not stall every other request on the loop.
        await asyncio.to_thread(check_archive, req.bundle)
        await self._preflight(principal, req, timeout)
        uri = await asyncio.to_thread(self.blobs.put, hex_digest, req.bundle)
        handlers = [json_format.MessageToDict(h, preserving_proto_field_name=True) for h in req.handlers]
        row, created = await self.store.deployment_record(principal.app_id, req.digest, module, handlers, uri)
        self._cache.pop(principal.app_id, None)
        return to_message(row, principal.app_name, created)

    async def _preflight(self, principal: Principal, req: apps_pb2.CreateDeploymentRequest,
                         timeout: float) -> None:
        """Refuse (before anything is stored) a deployment that drops handlers live tasks or runs
        still use, unless the request allows it. A re-deploy of the active digest changes nothing,
        and one that drops no handler, or sets the flag, counts nothing."""
        row = await self.store.active_deployment_get(principal.app_id)
        if row is None or row.digest == req.digest or req.allow_dropping_live_handlers:
            return
        gone = dropped((h["name"] for h in row.handlers), (h.name for h in req.handlers))
        live = await self.preflight.live_counts(principal.tenant_id, principal.app_id, gone, timeout)
        err = refusal(principal.app_name, live)
        if err is not None:
            raise err

    async def active(self, app_id: str) -> tuple[str, apps_pb2.Deployment]:
        """(tenant_id, deployment) of the app's active version, for host agents."""
        row = await self.store.active_deployment_get(app_id)
        if row is None:
            raise NotFound(f"app {app_id[:64]!r} has no active deployment")
        return row.tenant_id, to_message(row, row.app_name, created=False)

    async def bundle(self, digest: str) -> bytes:
        """The bundle bytes of a recorded deployment, checked against the digest."""
        uri = await self.store.deployment_get_bundle_uri(digest)
        if uri is None:
            raise NotFound(f"no deployment has digest {digest[:80]!r}")
        return await asyncio.to_thread(self.blobs.get, uri)
