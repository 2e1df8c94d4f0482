"""Who is calling: API keys (tenant + app), the admin key, host agent tokens.

Keys travel as `authorization: Bearer <key>` (gRPC metadata or the HTTP
header). Only their sha256 is stored and compared. A verified key is cached
for auth_cache_s, so revoking one takes effect within that time; unknown
keys are not cached, so a key made a moment ago works at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping

from ratchet.libs.rpc.errors import PermissionDenied, Unauthenticated
from ratchet.services.gateway.store import ControlStore, KeyOwner

KEY_PREFIX = "rk_"
_CACHE_MAX = 100_000


def new_api_key() -> str:
    """A fresh API key: "rk_" + 32 url-safe random characters (192 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(24)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def bearer(metadata: Mapping[str, str]) -> str:
    """The token of an `authorization: Bearer <token>` header, else Unauthenticated."""
    value = metadata.get("authorization", "")
    if not value:
        raise Unauthenticated("missing credentials: send the header `authorization: Bearer <api key>`")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("malformed authorization header: expected `Bearer <api key>`")
    return token.strip()


@dataclasses.dataclass(frozen=True)
class Principal:
    """A caller holding an app's API key."""

    tenant_id: str
    app_id: str
    app_name: str


class Authenticator:
    """Resolves credentials; the only place that compares secrets."""

    def __init__(self, store: ControlStore, admin_key_sha256: str, host_token_sha256: list[str],
                 cache_s: float, monotonic: Callable[[], float] = time.monotonic):
        self.store = store
        self.admin_hash = admin_key_sha256
        self.host_hashes = list(host_token_sha256)
        self.cache_s = cache_s
        self.monotonic = monotonic
        self._cache: dict[str, tuple[float, KeyOwner]] = {}

    async def app(self, metadata: Mapping[str, str]) -> Principal:
        """The tenant and app of an API key; Unauthenticated if unknown or revoked."""
        h = key_hash(bearer(metadata))
        now = self.monotonic()
        hit = self._cache.get(h)
        if hit is not None and hit[0] > now:
            owner = hit[1]
        else:
            owner = await self.store.api_key_get_by_hash(h)
            if owner is None:
                self._cache.pop(h, None)
                raise Unauthenticated("unknown or revoked API key: check RATCHET_API_KEY "
                                      "(`ratchet tenants create NAME` issues one)")
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()
            self._cache[h] = (now + self.cache_s, owner)
        return Principal(owner.tenant_id, owner.app_id, owner.app_name)

    def admin(self, metadata: Mapping[str, str]) -> None:
        """Admin key only (TenantService)."""
        if not hmac.compare_digest(key_hash(bearer(metadata)), self.admin_hash):
            raise Unauthenticated("this call needs the platform's admin key")

    def host(self, metadata: Mapping[str, str]) -> None:
        """A mesh token only (ControlService): a host agent's or the cron service's."""
        h = key_hash(bearer(metadata))
        if not any(hmac.compare_digest(h, known) for known in self.host_hashes):
            raise Unauthenticated("this call needs a mesh token (a host agent's or the cron service's; "
                                  "config host_token_sha256)")


def require_app(principal: Principal, app: str) -> None:
    """The key must belong to the named app (PERMISSION_DENIED, naming the key's app)."""
    if principal.app_name != app:
        raise PermissionDenied(f"this API key belongs to app {principal.app_name!r}, not {app[:64]!r}: "
                               f"use that app's key or deploy with --app {principal.app_name}")
