"""The OpenAPI document: generated from the descriptors, valid, and committed fresh."""

from __future__ import annotations

import json

from ratchet.services.gateway.rest import openapi
from ratchet.services.gateway.rest.routes import routes_for


def _refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def test_committed_copy_is_fresh():
    fresh = openapi.render(openapi.generate(openapi.public_services()))
    assert openapi.COMMITTED.read_text() == fresh, \
        "services/gateway/openapi.json is stale: run `python -m ratchet.services.gateway.rest.openapi`"


def test_every_route_is_documented_and_every_ref_resolves():
    doc = openapi.generate(openapi.public_services())
    assert doc["openapi"].startswith("3.1")
    for r in routes_for(openapi.public_services()):
        op = doc["paths"][r.template.openapi_path][r.http_method.lower()]
        assert op["operationId"].endswith(r.method.name)
        for v in r.template.variables:
            assert {"name": v, "in": "path", "required": True} .items() <= \
                next(p for p in op["parameters"] if p["name"] == v).items()
    schemas = doc["components"]["schemas"]
    for ref in _refs(doc):
        assert ref.startswith("#/components/schemas/") and ref.split("/")[-1] in schemas, ref
    assert doc["components"]["securitySchemes"]["bearer"] == {**doc["components"]["securitySchemes"]["bearer"],
                                                               "type": "http", "scheme": "bearer"}
    json.dumps(doc)  # serialisable as is


def test_message_schemas_follow_proto_json():
    schemas = openapi.generate(openapi.public_services())["components"]["schemas"]
    enq = schemas["ratchet.api.tasks.v1.EnqueueTaskRequest"]
    assert enq["additionalProperties"] is False
    assert set(enq["properties"]) == {"task_type", "payload", "queue", "delay", "run_at", "idempotency_key",
                                      "retry", "timeouts", "task_id", "payload_json"}
    assert enq["properties"]["delay"]["pattern"].endswith("s$")
    assert enq["properties"]["run_at"]["format"] == "date-time"
    assert schemas["ratchet.api.tasks.v1.TaskState"]["enum"][1] == "TASK_STATE_ENQUEUED"
    assert schemas["ratchet.api.tasks.v1.Attempt"]["properties"]["lease_epoch"]["format"] == "int64"
    body = schemas["ratchet.api.tasks.v1.CancelTaskRequest.Body"]
    assert body["properties"] == {}  # task_id travels in the path
    dep = schemas["ratchet.api.apps.v1.CreateDeploymentRequest.Body"]["properties"]
    assert "app" not in dep and dep["bundle"]["contentEncoding"] == "base64"
