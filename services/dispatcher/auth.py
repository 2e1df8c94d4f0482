"""Host-agent authentication. Only host agents hold the dispatch credential
(follow-up Q6): sandboxes never see it. Every DispatchService call must carry
`authorization: Bearer <token>`; we keep only sha256 digests of the accepted
tokens, so the config file does not hold a usable secret.

BreakerAdminService (the gateway's BreakerService proxies to it) is open to
callers on the loopback interface, like history and cron, which no mesh
service authenticates yet; any other peer must present an accepted token as
above. The dispatcher's port is the one that faces host agents, and so the
machines customer code runs on: a call from there could otherwise list or
reset any tenant's breakers. Sandboxes hold no token (Q6).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable, Sequence

import grpc

from ratchet.libs.rpc.errors import abort
from ratchet.services.dispatcher.errors import Unauthenticated

SERVICE_PREFIX = "/ratchet.internal.worker.v1.DispatchService/"
ADMIN_PREFIX = "/ratchet.internal.dispatcher.v1.BreakerAdminService/"


class TokenVerifier:
    """Checks bearer tokens against a list of hex sha256 digests."""

    def __init__(self, token_sha256: Iterable[str]):
        self._digests = [bytes.fromhex(h) for h in token_sha256]
        if not self._digests:
            raise ValueError("at least one host-agent token digest is required")

    def verify(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> None:
        """Return if the metadata carries an accepted token; raise Unauthenticated otherwise."""
        header = None
        for key, value in metadata or ():
            if key.lower() == "authorization":
                header = value.decode() if isinstance(value, bytes) else value
                break
        if header is None:
            raise Unauthenticated("missing credentials: send metadata 'authorization: Bearer <host-agent token>'")
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("malformed authorization metadata: expected 'Bearer <host-agent token>'")
        digest = hashlib.sha256(token.strip().encode()).digest()
        # Compare against every digest so timing does not reveal which one matched.
        ok = False
        for known in self._digests:
            ok |= hmac.compare_digest(digest, known)
        if not ok:
            raise Unauthenticated("host-agent token not accepted: check the token the agent was given")


def is_loopback(peer: str | None) -> bool:
    """Whether a gRPC peer string ('ipv4:127.0.0.1:5000', 'ipv6:[::1]:5000')
    is on this host's loopback interface."""
    kind, _, rest = (peer or "").partition(":")
    if kind not in ("ipv4", "ipv6"):
        return False
    host = rest.rsplit(":", 1)[0].strip("[]")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses DispatchService calls without an accepted token, and
    BreakerAdminService calls from off the host without one; health and
    reflection stay open so probes work without the credential."""

    def __init__(self, verifier: TokenVerifier):
        self._verifier = verifier

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if handler_call_details.method.startswith(ADMIN_PREFIX):
            return _admin_guard(handler, self._verifier, handler_call_details.invocation_metadata)
        if not handler_call_details.method.startswith(SERVICE_PREFIX):
            return handler
        try:
            self._verifier.verify(handler_call_details.invocation_metadata)
        except Unauthenticated as err:
            return _refusal(handler, err)
        return handler


def _admin_guard(handler: grpc.RpcMethodHandler, verifier: TokenVerifier, metadata) -> grpc.RpcMethodHandler:
    """`handler` (unary) behind the loopback-or-token check; the peer is only
    known once the call runs, so the check happens there."""

    async def guarded(request, context):
        peer = context.peer()
        if not is_loopback(peer):
            try:
                verifier.verify(metadata)
            except Unauthenticated as err:
                refusal = Unauthenticated(f"BreakerAdminService from {peer} (not loopback): {err.message}")
                await abort(context, refusal, "BreakerAdminService")
        return await handler.unary_unary(request, context)

    return grpc.unary_unary_rpc_method_handler(guarded, request_deserializer=handler.request_deserializer,
                                               response_serializer=handler.response_serializer)


def _refusal(handler: grpc.RpcMethodHandler, err: Unauthenticated) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that only answers `err`'s status."""

    async def abort_unary(request, context):
        await abort(context, err, "DispatchService")

    async def abort_stream(request, context):
        await abort(context, err, "DispatchService")
        yield  # pragma: no cover  (makes this an async generator, as the stream shape needs)

    kwargs = dict(request_deserializer=handler.request_deserializer,
                  response_serializer=handler.response_serializer)
    if handler.request_streaming or handler.response_streaming:
        if handler.request_streaming:
            raise NotImplementedError("DispatchService has no client-streaming methods")
        return grpc.unary_stream_rpc_method_handler(abort_stream, **kwargs)
    return grpc.unary_unary_rpc_method_handler(abort_unary, **kwargs)
