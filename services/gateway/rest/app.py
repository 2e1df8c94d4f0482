"""The REST server: HTTP/JSON translated to the same handlers as gRPC.

Routes, request parsing and response shapes all come from the proto
descriptors (routes.py); errors use the shared gRPC->HTTP table, or the
explicit HTTP status an error carries (413).
"""

from __future__ import annotations

import json
import logging
import urllib.parse

from aiohttp import web
from google.protobuf import json_format, message_factory
from google.protobuf.message import Message

from ratchet.libs.rpc import errors
from ratchet.services.gateway import handlers as _handlers
from ratchet.services.gateway.rest import openapi
from ratchet.services.gateway.rest import query as query_params
from ratchet.services.gateway.rest.routes import Route, needs_large_body, routes_for

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 * 1024 * 1024
_CHUNK = 64 * 1024


def _error_response(err: errors.ServiceError) -> web.Response:
    return web.json_response(err.to_json(), status=err.http_status)


def _set_path(data: dict, field_path: str, value) -> None:
    *parents, leaf = field_path.split(".")
    for p in parents:
        child = data.get(p)
        if not isinstance(child, dict):
            child = data[p] = {}
        data = child
    data[leaf] = value


def to_json(msg: Message) -> dict:
    """A response as JSON with proto field names, every plain field present."""
    return json_format.MessageToDict(msg, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


class RestServer:
    """An aiohttp application over the handler objects of the public services."""

    def __init__(self, handler_objs: list, rpc_timeout_s: float, max_bundle_bytes: int):
        self.rpc_timeout_s = rpc_timeout_s
        self.routes = routes_for([h.service for h in handler_objs])
        by_service = {h.service.full_name: h for h in handler_objs}
        self._fn = {r.method.full_name: _handlers.method(by_service[r.method.containing_service.full_name], r.method)
                    for r in self.routes}
        # base64 inflates bytes by 4/3; JSON framing gets a little room on top.
        self._large_limit = max(MAX_BODY_BYTES, max_bundle_bytes * 4 // 3 + 1024 * 1024)
        self._limit = {r.method.full_name: self._large_limit if needs_large_body(r.method.input_type)
                       else MAX_BODY_BYTES for r in self.routes}
        self.openapi = openapi.generate([h.service for h in handler_objs])

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self._large_limit)
        app.router.add_get("/openapi.json", self._openapi)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    async def _openapi(self, request: web.Request) -> web.Response:
        return web.json_response(self.openapi)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "service": "gateway",
                                  "openapi": "/openapi.json", "routes": len(self.routes)})

    def _find(self, method: str, raw_path: str) -> tuple[Route, dict[str, str]]:
        allowed = []
        for r in self.routes:
            values = r.template.match(raw_path)
            if values is None:
                continue
            if r.http_method == method:
                return r, values
            allowed.append(r.http_method)
        if allowed:
            raise _MethodNotAllowed(sorted(set(allowed)))
        raise errors.NotFound(f"no API route for {method} {raw_path[:200]}; see /openapi.json")

    async def _read_body(self, request: web.Request, limit: int) -> bytes:
        """Refuse oversize bodies before parsing, whatever Content-Length claims."""
        if request.content_length is not None and request.content_length > limit:
            raise errors.TooLarge(f"request body is {request.content_length} bytes; the limit is {limit} bytes")
        data = bytearray()
        while True:
            chunk = await request.content.read(_CHUNK)
            if not chunk:
                return bytes(data)
            data += chunk
            if len(data) > limit:
                raise errors.TooLarge(f"request body exceeds the limit of {limit} bytes")

    def _build(self, route: Route, values: dict[str, str], raw: bytes, query) -> Message:
        data: dict = {}
        if route.body:
            if query:
                raise errors.InvalidArgument(f"query parameters {sorted(set(query))} are not accepted here; "
                                             f"send fields in the JSON body")
            try:
                parsed = json.loads(raw) if raw.strip() else {}
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise errors.InvalidArgument(f"request body is not valid JSON: {e}") from None
            if route.body == "*":
                if not isinstance(parsed, dict):
                    raise errors.InvalidArgument("request body must be a JSON object")
                data = parsed
            else:
                _set_path(data, route.body, parsed)
        else:
            data = query_params.parse_query(query, route.method.input_type, route.path_fields)
            query_params.check_values(data, message_factory.GetMessageClass(route.method.input_type)())
        for field_path, value in values.items():
            _set_path(data, field_path, value)
        msg = message_factory.GetMessageClass(route.method.input_type)()
        try:
            json_format.ParseDict(data, msg, ignore_unknown_fields=False)
        except json_format.ParseError as e:
            raise errors.InvalidArgument(f"invalid request: {e}") from None
        return msg

    async def dispatch(self, request: web.Request) -> web.Response:
        """Route, parse, call the handler, render: one path for every RPC."""
        try:
            raw_path = urllib.parse.urlsplit(request.raw_path).path
            route, values = self._find(request.method, raw_path)
            raw = await self._read_body(request, self._limit[route.method.full_name]) if route.body else b""
            msg = self._build(route, values, raw, request.query)
            call = _handlers.Call(metadata={"authorization": request.headers.get("Authorization", "")},
                                  timeout=self.rpc_timeout_s)
            resp = await _handlers.invoke(self._fn[route.method.full_name], msg, call)
            return web.json_response(to_json(resp))
        except _MethodNotAllowed as e:
            resp = _error_response(errors.Unimplemented(f"{request.method} is not allowed here; "
                                                        f"use {', '.join(e.allowed)}", http=405))
            resp.headers["Allow"] = ", ".join(e.allowed)
            return resp
        except errors.ServiceError as err:
            if err.http_status >= 500:
                log.warning("%s %s -> %s: %s", request.method, request.path, err.http_status, err.message)
            return _error_response(err)


class _MethodNotAllowed(Exception):
    def __init__(self, allowed: list[str]):
        super().__init__(allowed)
        self.allowed = allowed
