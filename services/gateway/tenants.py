"""Tenants: create one with its app "default" and its first API key."""

from __future__ import annotations

import re

from ratchet.api.tenants.v1 import tenants_pb2
from ratchet.libs.rpc.errors import AlreadyExists, InvalidArgument
from ratchet.services.gateway.auth import key_hash, new_api_key
from ratchet.services.gateway.store import ControlStore

TENANT_NAME = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
DEFAULT_APP = "default"


async def create_tenant(store: ControlStore, req: tenants_pb2.CreateTenantRequest) -> tenants_pb2.CreateTenantResponse:
    """The key is returned once; only its hash is stored."""
    if not TENANT_NAME.match(req.name):
        raise InvalidArgument("name must be 1..64 characters of [a-z0-9-] starting with a letter, "
                              f"got {req.name[:80]!r}")
    key = new_api_key()
    made = await store.tenant_create(req.name, DEFAULT_APP, key_hash(key))
    if made is None:
        raise AlreadyExists(f"a tenant named {req.name!r} already exists")
    return tenants_pb2.CreateTenantResponse(tenant_id=made.tenant_id, app_id=made.app_id, app=made.app_name,
                                            api_key=key)
