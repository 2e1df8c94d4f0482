"""Config validation and the token check (pure)."""

from __future__ import annotations

import hashlib

import pytest

from ratchet.libs.config import ConfigError
from ratchet.services.dispatcher.auth import TokenVerifier
from ratchet.services.dispatcher.config import DispatcherConfig, load
from ratchet.services.dispatcher.errors import Unauthenticated

H = hashlib.sha256(b"tok").hexdigest()
GOOD = dict(history_target="127.0.0.1:7001", shard_ids=[0, 1], host_token_sha256=[H])


def test_defaults():
    config = DispatcherConfig(**GOOD)
    assert (config.host, config.grpc_port, config.timer_interval_s, config.lease_duration_s) == \
        ("127.0.0.1", 0, 0.25, 30.0)
    assert (config.poll_max_wait_s, config.rpc_timeout_s, config.log_level) == (20.0, 10.0, "INFO")


@pytest.mark.parametrize("change, field", [
    ({"history_target": "nohost"}, "history_target"),
    ({"shard_ids": []}, "shard_ids"),
    ({"shard_ids": [0, 0]}, "shard_ids"),
    ({"shard_ids": [-1]}, "shard_ids"),
    ({"host_token_sha256": []}, "host_token_sha256"),
    ({"host_token_sha256": ["abc"]}, "host_token_sha256"),
    ({"poll_max_wait_s": 61}, "poll_max_wait_s"),
    ({"rpc_timeout_s": 0}, "rpc_timeout_s"),
    ({"log_level": "LOUD"}, "log_level"),
])
def test_bad_values_name_the_field(change, field):
    with pytest.raises(ConfigError, match=field):
        DispatcherConfig(**{**GOOD, **change})


def test_env_overrides(monkeypatch):
    monkeypatch.setenv("RATCHET_DISPATCHER_HISTORY_TARGET", "127.0.0.1:9")
    monkeypatch.setenv("RATCHET_DISPATCHER_SHARD_IDS", "[2, 3]")
    monkeypatch.setenv("RATCHET_DISPATCHER_HOST_TOKEN_SHA256", f'["{H.upper()}"]')
    config = load()
    assert config.shard_ids == [2, 3] and config.host_token_sha256 == [H]


def test_required_fields_are_named():
    with pytest.raises(ConfigError, match="history_target"):
        load(overrides={"shard_ids": [0], "host_token_sha256": [H]})


def test_token_verifier():
    verifier = TokenVerifier([hashlib.sha256(b"other").hexdigest(), H])
    verifier.verify([("authorization", "Bearer tok")])
    verifier.verify([("Authorization", b"bearer tok")])
    for metadata, fragment in [(None, "missing"), ([("authorization", "Bearer nope")], "not accepted"),
                               ([("authorization", "tok")], "malformed"), ([("authorization", "Bearer ")], "malformed")]:
        with pytest.raises(Unauthenticated, match=fragment):
            verifier.verify(metadata)
