"""Path templates and the routes read from the google.api.http annotations."""

from __future__ import annotations

import pytest

from ratchet.services.gateway.rest import openapi
from ratchet.services.gateway.rest.routes import compile_template, needs_large_body, routes_for

SCHEDULES = "ratchet.api.schedules.v1.ScheduleService"
WORKFLOWS = "ratchet.api.workflows.v1.WorkflowService"


def test_plain_variable_matches_one_segment_and_decodes():
    t = compile_template("/v1/tasks/{task_id}")
    assert t.match("/v1/tasks/abc") == {"task_id": "abc"}
    assert t.match("/v1/tasks/a%20b") == {"task_id": "a b"}
    assert t.match("/v1/tasks/a/b") is None
    assert t.match("/v1/tasks") is None
    assert t.match("/v1/tasks:batch") is None
    assert t.openapi_path == "/v1/tasks/{task_id}"


def test_custom_verb_and_trailing_literal():
    batch = compile_template("/v1/tasks:batch")
    assert batch.match("/v1/tasks:batch") == {}
    assert batch.match("/v1/tasks") is None
    assert batch.match("/v1/tasksXbatch") is None
    cancel = compile_template("/v1/tasks/{task_id}/cancel")
    assert cancel.match("/v1/tasks/t1/cancel") == {"task_id": "t1"}
    assert cancel.match("/v1/tasks/t1/cancelx") is None


def test_variable_with_sub_pattern_and_double_star():
    t = compile_template("/v1/{name=projects/*/tasks/*}:get")
    assert t.match("/v1/projects/p/tasks/t:get") == {"name": "projects/p/tasks/t"}
    assert t.match("/v1/projects/p:get") is None
    assert t.openapi_path == "/v1/{name}:get"
    assert compile_template("/files/{path=**}").match("/files/a/b/c") == {"path": "a/b/c"}


@pytest.mark.parametrize("bad", ["v1/tasks", "/v1/{Bad}", "/v1/a b", "/v1/{x=**/y}"])
def test_unsupported_templates_fail_at_start_up(bad):
    with pytest.raises(ValueError):
        compile_template(bad)


def test_routes_come_from_the_public_protos():
    routes = {(r.http_method, r.template.text): (r.method.full_name, r.body)
              for r in routes_for(openapi.public_services())}
    assert routes == {
        ("POST", "/v1/tasks"): ("ratchet.api.tasks.v1.TaskService.EnqueueTask", "*"),
        ("POST", "/v1/tasks:batch"): ("ratchet.api.tasks.v1.TaskService.EnqueueTasks", "*"),
        ("GET", "/v1/tasks/{task_id}"): ("ratchet.api.tasks.v1.TaskService.GetTask", ""),
        ("POST", "/v1/tasks/{task_id}/cancel"): ("ratchet.api.tasks.v1.TaskService.CancelTask", "*"),
        ("GET", "/v1/tasks"): ("ratchet.api.tasks.v1.TaskService.ListTasks", ""),
        ("POST", "/v1/tasks:retry"): ("ratchet.api.tasks.v1.TaskService.RetryTasks", "*"),
        ("POST", "/v1/tasks:cancel"): ("ratchet.api.tasks.v1.TaskService.CancelTasks", "*"),
        ("GET", "/v1/operations/{operation_id}"): ("ratchet.api.tasks.v1.TaskService.GetBulkOperation", ""),
        ("POST", "/v1/operations/{operation_id}/cancel"):
            ("ratchet.api.tasks.v1.TaskService.CancelBulkOperation", "*"),
        ("GET", "/v1/breakers"): ("ratchet.api.tasks.v1.BreakerService.ListBreakers", ""),
        ("POST", "/v1/breakers/{task_type}:reset"): ("ratchet.api.tasks.v1.BreakerService.ResetBreaker", "*"),
        ("POST", "/v1/schedules"): (f"{SCHEDULES}.CreateSchedule", "*"),
        ("GET", "/v1/schedules/{schedule_id}"): (f"{SCHEDULES}.GetSchedule", ""),
        ("GET", "/v1/schedules"): (f"{SCHEDULES}.ListSchedules", ""),
        ("POST", "/v1/schedules/{schedule_id}/pause"): (f"{SCHEDULES}.PauseSchedule", "*"),
        ("POST", "/v1/schedules/{schedule_id}/resume"): (f"{SCHEDULES}.ResumeSchedule", "*"),
        ("DELETE", "/v1/schedules/{schedule_id}"): (f"{SCHEDULES}.DeleteSchedule", ""),
        ("POST", "/v1/schedules/{schedule_id}/trigger"): (f"{SCHEDULES}.TriggerSchedule", "*"),
        ("POST", "/v1/apps/{app}/deployments"): ("ratchet.api.apps.v1.AppService.CreateDeployment", "*"),
        ("POST", "/v1/tenants"): ("ratchet.api.tenants.v1.TenantService.CreateTenant", "*"),
        ("POST", "/v1/workflows"): (f"{WORKFLOWS}.StartWorkflow", "*"),
        ("GET", "/v1/workflows/{workflow_id}"): (f"{WORKFLOWS}.GetWorkflow", ""),
        ("GET", "/v1/workflows/{workflow_id}/steps/{position}/children"): (f"{WORKFLOWS}.ListWorkflowChildren", ""),
        ("GET", "/v1/workflows"): (f"{WORKFLOWS}.ListWorkflows", ""),
        ("POST", "/v1/workflows/{workflow_id}/cancel"): (f"{WORKFLOWS}.CancelWorkflow", "*"),
        ("POST", "/v1/events"): (f"{WORKFLOWS}.SendEvent", "*"),
        ("POST", "/v1/workflows/{workflow_id}/events"): (f"{WORKFLOWS}.SendWorkflowEvent", "*"),
    }


def test_workflow_routes_do_not_shadow_each_other():
    routes = routes_for(openapi.public_services())
    by_name = {r.method.name: r.template for r in routes}
    wid = "0190a000-0000-8000-8000-000000000000"
    assert by_name["GetWorkflow"].match(f"/v1/workflows/{wid}") == {"workflow_id": wid}
    assert by_name["GetWorkflow"].match(f"/v1/workflows/{wid}/events") is None
    assert by_name["SendWorkflowEvent"].match(f"/v1/workflows/{wid}/events") == {"workflow_id": wid}
    assert by_name["CancelWorkflow"].match(f"/v1/workflows/{wid}/cancel") == {"workflow_id": wid}


def test_custom_verb_routes_do_not_shadow_variables():
    routes = routes_for(openapi.public_services())
    reset = next(r for r in routes if r.method.name == "ResetBreaker")
    assert reset.template.match("/v1/breakers/billing.charge:reset") == {"task_type": "billing.charge"}
    get = next(r for r in routes if r.method.name == "GetTask")
    assert get.template.match("/v1/tasks:retry") is None


def test_only_bundle_upload_gets_the_large_body_limit():
    large = {r.method.name for r in routes_for(openapi.public_services()) if needs_large_body(r.method.input_type)}
    assert large == {"CreateDeployment"}
