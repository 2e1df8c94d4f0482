"""CreateSchedule validation (every refusal names the field) and the config."""

from __future__ import annotations

import datetime as dt

import pytest
from google.protobuf import duration_pb2, struct_pb2

from ratchet.api.schedules.v1 import schedules_pb2 as spb
from ratchet.libs.config import ConfigError
from ratchet.services.cron import config as cron_config
from ratchet.services.cron.errors import InvalidArgument
from ratchet.services.cron.validation import fingerprint, validate_create

NOW = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def request(**kw) -> spb.CreateScheduleRequest:
    base = dict(cron="*/5 * * * *", task_template=spb.TaskTemplate(task_type="report"))
    base.update(kw)
    return spb.CreateScheduleRequest(**base)


def test_defaults():
    v = validate_create(request(), NOW, 1.0)
    assert (v.timezone, v.overlap_policy, v.catchup_window_ms, v.request_id) == ("UTC", "ALLOW", 0, None)
    assert v.template == {"task_type": "report"}


def test_fields_are_kept():
    payload = struct_pb2.Value(struct_value=struct_pb2.Struct(fields={"n": struct_pb2.Value(number_value=1)}))
    v = validate_create(request(timezone="Europe/Berlin", overlap_policy=spb.OVERLAP_POLICY_BUFFER_ONE,
                                catchup_window=duration_pb2.Duration(seconds=90, nanos=500_000_000),
                                request_id="r-1",
                                task_template=spb.TaskTemplate(task_type="report", queue="q.1", payload=payload)),
                        NOW, 1.0)
    assert (v.timezone, v.overlap_policy, v.catchup_window_ms, v.request_id) == \
        ("Europe/Berlin", "BUFFER_ONE", 90500, "r-1")
    assert v.template == {"task_type": "report", "queue": "q.1", "payload": {"n": 1.0}}


@pytest.mark.parametrize("kw,expected", [
    (dict(cron="61 * * * *"), "61 is out of range for the minute field (allowed 0-59)"),
    (dict(cron="* * *"), "has 3 field(s)"),
    (dict(cron="0 0 30 2 *"), "never fires"),
    (dict(timezone="Europe/Atlantis"), "unknown time zone 'Europe/Atlantis'"),
    (dict(cron="* * * * * *"), None),
    (dict(overlap_policy=9), "overlap_policy 9 is not one of"),
    (dict(catchup_window=duration_pb2.Duration(seconds=-1)), "catchup_window must be >= 0"),
    (dict(catchup_window=duration_pb2.Duration(seconds=400 * 86400)), "catchup_window must be at most 366 days"),
    (dict(task_template=spb.TaskTemplate()), "task_template.task_type is required"),
    (dict(task_template=None), "task_template.task_type is required"),
    (dict(task_template=spb.TaskTemplate(task_type="x\n")), "task_template.task_type must be 1..200 printable"),
    (dict(task_template=spb.TaskTemplate(task_type="x", queue="bad queue")), "task_template.queue 'bad queue'"),
    (dict(request_id="x" * 201), "request_id must be 1..200 printable ASCII"),
])
def test_refusals_name_the_field(kw, expected):
    if expected is None:
        validate_create(request(**kw), NOW, 1.0)
        return
    with pytest.raises(InvalidArgument) as err:
        validate_create(request(**kw), NOW, 1.0)
    assert expected in err.value.message


def test_frequency_floor_is_configurable():
    with pytest.raises(InvalidArgument) as err:
        validate_create(request(cron="*/2 * * * * *"), NOW, 10.0)
    assert "fires 2s apart at its closest; the smallest interval allowed is 10s" in err.value.message


def test_oversize_payload():
    big = struct_pb2.Value(string_value="x" * 300_000)
    with pytest.raises(InvalidArgument) as err:
        validate_create(request(task_template=spb.TaskTemplate(task_type="x", payload=big)), NOW, 1.0)
    assert "over 256 KiB" in err.value.message


def test_fingerprint_ignores_request_id_only():
    assert fingerprint(request(request_id="a")) == fingerprint(request(request_id="b"))
    assert fingerprint(request()) != fingerprint(request(cron="*/6 * * * *"))


def _cfg(**kw):
    base = dict(dsn="postgresql://x/ratchet_cron", gateway_target="127.0.0.1:1", history_target="127.0.0.1:2",
                shard_ids=[0, 1], mesh_token="t")
    base.update(kw)
    return cron_config.load(overrides=base)


def test_config_defaults_and_env(monkeypatch):
    c = _cfg()
    assert (c.tick_interval_s, c.min_interval_s, c.host) == (0.2, 1.0, "127.0.0.1")
    monkeypatch.setenv("RATCHET_CRON_GRPC_PORT", "4567")
    assert cron_config.load(overrides={k: v for k, v in _cfg().__dict__.items() if k != "grpc_port"}).grpc_port == 4567


@pytest.mark.parametrize("kw,expected", [
    (dict(dsn=""), "'dsn' is required"),
    (dict(gateway_target="nohost"), "'gateway_target' must be 'host:port'"),
    (dict(shard_ids=[]), "'shard_ids' must be a non-empty list"),
    (dict(shard_ids=[1, 1]), "lists a shard twice"),
    (dict(mesh_token=""), "'mesh_token' is required"),
    (dict(tick_interval_s=0), "'tick_interval_s' must be > 0"),
    (dict(misfire_grace_s=-1), "'misfire_grace_s' must be >= 0"),
    (dict(pool_max_size=3), "'pool_max_size' must be at least delivery_concurrency + 2"),
    (dict(log_level="LOUD"), "'log_level' must be"),
])
def test_config_refusals_name_the_field(kw, expected):
    with pytest.raises(ConfigError) as err:
        _cfg(**kw)
    assert expected in str(err.value)
