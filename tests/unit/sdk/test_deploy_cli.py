"""`ratchet deploy` and the deploy preflight against a fake AppService (the gateway's side of
the contract): a refusal is printed as one line naming the handlers and exits 1, and
--allow-dropping-live-handlers sends the field."""

from __future__ import annotations

import json
from concurrent import futures

import grpc
import pytest

from ratchet.api.apps.v1 import apps_pb2, apps_pb2_grpc
from ratchet.cli.main import main

pytestmark = pytest.mark.timeout(60)
REFUSAL = ("this deployment drops handlers that live tasks or workflow runs of app 'default' still use "
           "(queued, running, retrying or waiting): 'resize' (3 live); if it were deployed, those tasks and runs "
           "would fail with UnknownTaskType when they next run. Nothing was deployed. Keep the handlers until they "
           "drain (or cancel those tasks), or deploy anyway with `ratchet deploy --allow-dropping-live-handlers`")


class FakeApps(apps_pb2_grpc.AppServiceServicer):
    """Refuses every deployment that does not set allow_dropping_live_handlers (as the gateway
    does when the app's live tasks use a handler it drops); records each request."""

    def __init__(self):
        self.requests: list[apps_pb2.CreateDeploymentRequest] = []

    def CreateDeployment(self, request, context):
        self.requests.append(request)
        if not request.allow_dropping_live_handlers:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, REFUSAL)
        return apps_pb2.CreateDeploymentResponse(deployment=apps_pb2.Deployment(
            app=request.app, digest=request.digest, module=request.module, handlers=request.handlers, created=True))


@pytest.fixture
def apps(monkeypatch, tmp_path):
    fake = FakeApps()
    server = grpc.server(futures.ThreadPoolExecutor(2))
    apps_pb2_grpc.add_AppServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    monkeypatch.setenv("RATCHET_ENDPOINT", f"127.0.0.1:{port}")
    monkeypatch.setenv("RATCHET_API_KEY", "rk_test")
    monkeypatch.chdir(tmp_path)
    yield fake
    server.stop(0)


@pytest.fixture
def app_dir(tmp_path):
    d = tmp_path / "app"
    d.mkdir()
    (d / "app.py").write_text("from ratchet import task\n\n\n@task\ndef send(ctx, payload):\n    return payload\n")
    return d


def test_a_preflight_refusal_is_printed_and_exits_nonzero(apps, app_dir, capsys):
    code = main(["deploy", str(app_dir)])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.startswith("error: FAILED_PRECONDITION: ") and "'resize' (3 live)" in err and err.count("\n") == 1
    assert "--allow-dropping-live-handlers" in err and "UnknownTaskType" in err
    assert "is the platform running" not in err
    assert [r.allow_dropping_live_handlers for r in apps.requests] == [False]
    assert [h.name for h in apps.requests[0].handlers] == ["send"]


def test_the_flag_sends_the_field_and_deploys(apps, app_dir, capsys):
    code = main(["deploy", str(app_dir), "--allow-dropping-live-handlers"])
    out, _ = capsys.readouterr()
    assert code == 0 and json.loads(out)["created"] is True
    assert [r.allow_dropping_live_handlers for r in apps.requests] == [True]


def test_the_help_says_what_the_flag_does(capsys):
    with pytest.raises(SystemExit):
        main(["deploy", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--allow-dropping-live-handlers" in text and "fail with UnknownTaskType when they next run" in text
