"""What to run for an app: its active deployment (cached) from the gateway's
ControlService, and the deployment's bundle (fetched once per digest)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable

import grpc

from ratchet.internal.gateway.v1 import control_pb2, control_pb2_grpc
from ratchet.services.hostagent.errors import ControlUnavailable, NoActiveDeployment


@dataclasses.dataclass(frozen=True)
class ActiveDeployment:
    """The version of an app that new attempts run."""

    app_id: str
    tenant_id: str
    digest: str
    module: str


class Deployments:
    """Active deployment per app, cached for `ttl_s`; concurrent lookups of one
    app share a single RPC."""

    def __init__(self, stub: control_pb2_grpc.ControlServiceStub, metadata, timeout_s: float, ttl_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self._stub, self._metadata, self._timeout_s, self._ttl_s = stub, metadata, timeout_s, ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[float, ActiveDeployment]] = {}
        self._inflight: dict[str, asyncio.Future] = {}

    def cached(self, app_id: str) -> ActiveDeployment | None:
        """The app's active deployment if the cache holds it fresh, else None (no call made)."""
        hit = self._cache.get(app_id)
        return hit[1] if hit is not None and hit[0] > self._clock() else None

    async def active(self, app_id: str) -> ActiveDeployment:
        """The app's active deployment; NoActiveDeployment or ControlUnavailable otherwise."""
        hit = self.cached(app_id)
        if hit is not None:
            return hit
        pending = self._inflight.get(app_id)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch(app_id))
            self._inflight[app_id] = pending
            pending.add_done_callback(lambda _f: self._inflight.pop(app_id, None))
        return await asyncio.shield(pending)

    async def _fetch(self, app_id: str) -> ActiveDeployment:
        try:
            resp = await self._stub.GetActiveDeployment(
                control_pb2.GetActiveDeploymentRequest(app_id=app_id),
                timeout=self._timeout_s, metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                raise NoActiveDeployment(
                    f"app {app_id} has no active deployment; deploy it with `ratchet deploy`") from None
            raise ControlUnavailable(
                f"could not read the active deployment of app {app_id}: {e.code().name}: {e.details()}") from None
        dep = ActiveDeployment(app_id=app_id, tenant_id=resp.tenant_id, digest=resp.deployment.digest,
                               module=resp.deployment.module or "app")
        self._cache[app_id] = (self._clock() + self._ttl_s, dep)
        return dep


def bundle_fetcher(stub: control_pb2_grpc.ControlServiceStub, metadata,
                   timeout_s: float) -> Callable[[str], Awaitable[bytes]]:
    """A function digest -> bundle bytes over ControlService.GetBundle."""

    async def fetch(digest: str) -> bytes:
        try:
            resp = await stub.GetBundle(control_pb2.GetBundleRequest(digest=digest),
                                        timeout=timeout_s, metadata=metadata)
        except grpc.aio.AioRpcError as e:
            raise ControlUnavailable(f"could not fetch bundle {digest}: {e.code().name}: {e.details()}") from None
        return resp.bundle

    return fetch
