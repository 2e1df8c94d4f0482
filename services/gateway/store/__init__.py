"""Typed wrappers over the control database's named queries.

Each method runs one named query from control.sql with a deadline; a lost
or refused connection becomes errors.Unavailable, so callers see one error.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import pathlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

from ratchet.libs.pg.queries import load_queries
from ratchet.libs.rpc import errors

Q = load_queries(pathlib.Path(__file__).with_name("control.sql"))
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class KeyOwner:
    """Who an API key speaks for."""

    key_id: str
    tenant_id: str
    app_id: str
    app_name: str


@dataclasses.dataclass(frozen=True)
class DeploymentRow:
    """A recorded deployment; handlers are Handler messages as JSON dicts."""

    deployment_id: int
    app_id: str
    digest: str
    module: str
    handlers: list[dict]
    bundle_uri: str
    created_at: dt.datetime
    tenant_id: str = ""
    app_name: str = ""


@dataclasses.dataclass(frozen=True)
class NewTenant:
    tenant_id: str
    app_id: str
    app_name: str


def _deployment(row: asyncpg.Record) -> DeploymentRow:
    data = dict(row)
    data["handlers"] = json.loads(data["handlers"])
    return DeploymentRow(**data)


def _guard(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Connection trouble and timeouts become Unavailable naming the control DB."""
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except (OSError, asyncpg.exceptions.PostgresConnectionError, asyncpg.exceptions.CannotConnectNowError,
                asyncpg.exceptions.TooManyConnectionsError, asyncpg.exceptions.InterfaceError) as e:
            raise errors.Unavailable(f"control database unavailable: {e}; retry shortly") from e
        except (TimeoutError, asyncpg.exceptions.QueryCanceledError) as e:
            raise errors.Unavailable("control database did not answer in time; retry shortly") from e
    return wrapper


class ControlStore:
    """The control database, reached through one asyncpg pool."""

    def __init__(self, pool: asyncpg.Pool, timeout_s: float = 10.0):
        self.pool = pool
        self.timeout = timeout_s

    @_guard
    async def api_key_get_by_hash(self, key_hash: str) -> KeyOwner | None:
        row = await self.pool.fetchrow(Q["api_key_get_by_hash"], key_hash, timeout=self.timeout)
        return KeyOwner(**dict(row)) if row else None

    @_guard
    async def tenant_create(self, name: str, app_name: str, key_hash: str) -> NewTenant | None:
        """Tenant, its first app and API key in one transaction; None if the name exists."""
        tenant_id, app_id = str(uuid.uuid4()), str(uuid.uuid4())
        async with self.pool.acquire(timeout=self.timeout) as conn, conn.transaction():
            if await conn.fetchrow(Q["tenant_insert"], tenant_id, name, timeout=self.timeout) is None:
                return None
            await conn.fetchrow(Q["app_insert"], app_id, tenant_id, app_name, timeout=self.timeout)
            await conn.fetchrow(Q["api_key_insert"], str(uuid.uuid4()), key_hash, tenant_id, app_id,
                                timeout=self.timeout)
        return NewTenant(tenant_id, app_id, app_name)

    @_guard
    async def deployment_record(self, app_id: str, digest: str, module: str, handlers: list[dict],
                                bundle_uri: str) -> tuple[DeploymentRow, bool]:
        """Record a deployment and make it active; (row, created). Same digest: the recorded one."""
        async with self.pool.acquire(timeout=self.timeout) as conn, conn.transaction():
            row = await conn.fetchrow(Q["deployment_insert"], app_id, digest, module,
                                      json.dumps(handlers, sort_keys=True), bundle_uri, timeout=self.timeout)
            created = row is not None
            if row is None:
                row = await conn.fetchrow(Q["deployment_get_by_digest"], app_id, digest, timeout=self.timeout)
            dep = _deployment(row)
            await conn.fetchrow(Q["active_deployment_set"], app_id, dep.deployment_id, timeout=self.timeout)
        return dep, created

    @_guard
    async def active_deployment_get(self, app_id: str) -> DeploymentRow | None:
        row = await self.pool.fetchrow(Q["active_deployment_get"], app_id, timeout=self.timeout)
        return _deployment(row) if row else None

    @_guard
    async def deployment_get_bundle_uri(self, digest: str) -> str | None:
        return await self.pool.fetchval(Q["deployment_get_bundle_uri"], digest, timeout=self.timeout)
