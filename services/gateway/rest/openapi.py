"""The OpenAPI 3.1 document, generated from the same descriptors as the routes.

`generate()` builds it; `write()` refreshes the committed copy
(services/gateway/openapi.json), which a test keeps in step with the protos.
Run `python -m ratchet.services.gateway.rest.openapi` after a contract change.
"""

from __future__ import annotations

import json
import pathlib

from google.protobuf import descriptor as _descriptor

from ratchet.services.gateway.rest import query
from ratchet.services.gateway.rest.routes import Route, routes_for

COMMITTED = pathlib.Path(__file__).resolve().parents[1] / "openapi.json"
_FD = _descriptor.FieldDescriptor
_WELL_KNOWN = {
    "google.protobuf.Duration": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]{1,9})?s$",
                                 "description": "A duration in seconds with an 's' suffix, e.g. \"1.5s\"."},
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time",
                                  "description": "An RFC 3339 instant, e.g. \"2026-01-01T00:00:00Z\"."},
    "google.protobuf.Value": {"description": "Any JSON value."},
    "google.protobuf.Struct": {"type": "object"},
    "google.protobuf.ListValue": {"type": "array"},
}
_SCALARS = {
    _FD.TYPE_DOUBLE: {"type": "number", "format": "double"},
    _FD.TYPE_FLOAT: {"type": "number", "format": "float"},
    _FD.TYPE_INT32: {"type": "integer", "format": "int32"},
    _FD.TYPE_SINT32: {"type": "integer", "format": "int32"},
    _FD.TYPE_SFIXED32: {"type": "integer", "format": "int32"},
    _FD.TYPE_UINT32: {"type": "integer", "format": "uint32", "minimum": 0},
    _FD.TYPE_FIXED32: {"type": "integer", "format": "uint32", "minimum": 0},
    # proto3 JSON writes 64-bit integers as strings and accepts either.
    _FD.TYPE_INT64: {"type": ["string", "integer"], "format": "int64"},
    _FD.TYPE_SINT64: {"type": ["string", "integer"], "format": "int64"},
    _FD.TYPE_SFIXED64: {"type": ["string", "integer"], "format": "int64"},
    _FD.TYPE_UINT64: {"type": ["string", "integer"], "format": "uint64"},
    _FD.TYPE_FIXED64: {"type": ["string", "integer"], "format": "uint64"},
    _FD.TYPE_BOOL: {"type": "boolean"},
    _FD.TYPE_STRING: {"type": "string"},
    _FD.TYPE_BYTES: {"type": "string", "contentEncoding": "base64"},
}
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object",
        "required": ["code", "http_status", "message"],
        "properties": {
            "code": {"type": "string", "description": "The gRPC status code name, e.g. INVALID_ARGUMENT."},
            "http_status": {"type": "integer"},
            "message": {"type": "string", "description": "What went wrong and what to do about it."},
            "original_task_id": {"type": "string",
                                 "description": "With 409 on enqueue: the task that holds the idempotency key."},
            "shard_id": {"type": "string",
                         "description": "With 503/504: the shard that did not answer (comma-separated when "
                                        "several did, for calls that span every shard)."},
            "operation_id": {"type": "string",
                             "description": "With 409 or 503 on a bulk retry/cancel: the operation concerned."},
        },
    }},
}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


class _Schemas:
    """Collects component schemas for messages and enums as they are referenced."""

    def __init__(self):
        self.components: dict[str, dict] = {"Error": ERROR_SCHEMA}

    def field(self, f: _descriptor.FieldDescriptor) -> dict:
        if f.type == _FD.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
            value = f.message_type.fields_by_name["value"]
            return {"type": "object", "additionalProperties": self.single(value)}
        if f.is_repeated:
            return {"type": "array", "items": self.single(f)}
        return self.single(f)

    def single(self, f: _descriptor.FieldDescriptor) -> dict:
        if f.type == _FD.TYPE_MESSAGE:
            return self.message(f.message_type)
        if f.type == _FD.TYPE_ENUM:
            e = f.enum_type
            if e.full_name not in self.components:
                self.components[e.full_name] = {"type": "string", "enum": [v.name for v in e.values]}
            return _ref(e.full_name)
        return dict(_SCALARS[f.type])

    def message(self, m: _descriptor.Descriptor, skip: frozenset = frozenset(), name: str | None = None) -> dict:
        if m.full_name in _WELL_KNOWN:
            return dict(_WELL_KNOWN[m.full_name])
        name = name or m.full_name
        if name not in self.components:
            self.components[name] = {}  # placeholder: recursion stops here
            self.components[name] = {
                "type": "object", "additionalProperties": False,
                "properties": {f.name: self.field(f) for f in m.fields if f.name not in skip}}
        return _ref(name)


def _query_schema(f: _descriptor.FieldDescriptor, schemas: _Schemas) -> dict:
    """A query parameter's schema: enums also accept their short names (FAILED);
    a repeated field is the parameter repeated (form style, exploded)."""
    if f.type == _FD.TYPE_ENUM:
        one = {"type": "string", "enum": query.enum_names(f.enum_type)}
    else:
        one = schemas.single(f)
    return {"type": "array", "items": one} if f.is_repeated else one


def _operation(route: Route, schemas: _Schemas) -> dict:
    m = route.method
    svc = m.containing_service
    path_fields = {v.split(".")[0] for v in route.template.variables}
    params = []
    for v in route.template.variables:
        f = m.input_type.fields_by_name.get(v.split(".")[0])
        schema = schemas.field(f) if f is not None and "." not in v else {"type": "string"}
        params.append({"name": v, "in": "path", "required": True, "schema": schema})
    op: dict = {"operationId": f"{svc.name}_{m.name}", "tags": [svc.name],
                "summary": f"{svc.full_name}.{m.name}",
                "responses": {
                    "200": {"description": "OK",
                            "content": {"application/json": {"schema": schemas.message(m.output_type)}}},
                    "default": {"description": "An error; the HTTP status follows the gRPC code.",
                                "content": {"application/json": {"schema": _ref("Error")}}}}}
    if route.body == "*":
        name = m.input_type.full_name + (".Body" if path_fields else "")
        body = schemas.message(m.input_type, skip=frozenset(path_fields), name=name)
        has_fields = any(f.name not in path_fields for f in m.input_type.fields)
        op["requestBody"] = {"required": has_fields, "content": {"application/json": {"schema": body}}}
    elif route.body:
        f = m.input_type.fields_by_name[route.body]
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schemas.field(f)}}}
    else:
        for name, f in query.query_fields(m.input_type, path_fields):
            params.append({"name": name, "in": "query", "required": False, "schema": _query_schema(f, schemas)})
    if params:
        op["parameters"] = params
    if svc.name == "TenantService":
        op["description"] = "Requires the platform's admin key as the bearer token."
    return op


def generate(services: list[_descriptor.ServiceDescriptor]) -> dict:
    """The OpenAPI 3.1 document of the REST bindings of these services."""
    schemas = _Schemas()
    paths: dict[str, dict] = {}
    for route in routes_for(services):
        paths.setdefault(route.template.openapi_path, {})[route.http_method.lower()] = _operation(route, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Ratchet API", "version": "v1",
                 "description": "Durable background tasks. Generated from the protos in protos/ratchet/api; "
                                "every operation is also a gRPC method of the same name."},
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": dict(sorted(schemas.components.items())),
                       "securitySchemes": {"bearer": {
                           "type": "http", "scheme": "bearer",
                           "description": "An app's API key (rk_...), or the admin key for TenantService."}}},
        "security": [{"bearer": []}],
    }


def public_services() -> list[_descriptor.ServiceDescriptor]:
    """The services the REST listener serves."""
    from ratchet.api.apps.v1 import apps_pb2
    from ratchet.api.schedules.v1 import schedules_pb2
    from ratchet.api.tasks.v1 import breakers_pb2, tasks_pb2
    from ratchet.api.tenants.v1 import tenants_pb2
    from ratchet.api.workflows.v1 import workflows_pb2
    return [tasks_pb2.DESCRIPTOR.services_by_name["TaskService"],
            workflows_pb2.DESCRIPTOR.services_by_name["WorkflowService"],
            breakers_pb2.DESCRIPTOR.services_by_name["BreakerService"],
            schedules_pb2.DESCRIPTOR.services_by_name["ScheduleService"],
            apps_pb2.DESCRIPTOR.services_by_name["AppService"],
            tenants_pb2.DESCRIPTOR.services_by_name["TenantService"]]


def render(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def write(path: pathlib.Path = COMMITTED) -> pathlib.Path:
    """Write the document for the public services to path (the committed copy by default)."""
    path.write_text(render(generate(public_services())))
    return path


if __name__ == "__main__":
    print(write())
