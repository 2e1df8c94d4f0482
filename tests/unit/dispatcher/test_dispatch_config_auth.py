"""Config validation and the token check (pure)."""

from __future__ import annotations

import hashlib

import pytest

from ratchet.libs.config import ConfigError
from ratchet.services.dispatcher.auth import TokenVerifier
from ratchet.services.dispatcher.config import DispatcherConfig, load
from ratchet.services.dispatcher.errors import Unauthenticated

H = hashlib.sha256(b"tok").hexdigest()
GOOD = dict(history_target="127.0.0.1:7001", shard_ids=[0, 1], host_token_sha256=[H],
            dsn="postgresql://127.0.0.1:5432/ratchet_dispatch")


def test_defaults():
    config = DispatcherConfig(**GOOD)
    assert (config.host, config.grpc_port, config.fallback_tick_live_s, config.lease_duration_s) == \
        ("127.0.0.1", 0, 1.0, 30.0)
    assert (config.poll_max_wait_s, config.rpc_timeout_s, config.log_level) == (20.0, 10.0, "INFO")
    assert (config.breaker_crash_threshold, config.breaker_window_s, config.breaker_cooldown_s) == (5, 60.0, 300.0)


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
    ({"dsn": " "}, "dsn"),
    ({"breaker_crash_threshold": 0}, "breaker_crash_threshold"),
    ({"breaker_crash_threshold": 1001}, "breaker_crash_threshold"),
    ({"breaker_window_s": 0}, "breaker_window_s"),
    ({"breaker_cooldown_s": -1}, "breaker_cooldown_s"),
    ({"pool_max_size": 0}, "pool_max_size"),
])
def test_bad_values_name_the_field(change, field):
    with pytest.raises(ConfigError, match=field):
        DispatcherConfig(**{**GOOD, **change})


def test_env_overrides(monkeypatch):
    monkeypatch.setenv("RATCHET_DISPATCHER_HISTORY_TARGET", "127.0.0.1:9")
    monkeypatch.setenv("RATCHET_DISPATCHER_SHARD_IDS", "[2, 3]")
    monkeypatch.setenv("RATCHET_DISPATCHER_HOST_TOKEN_SHA256", f'["{H.upper()}"]')
    monkeypatch.setenv("RATCHET_DISPATCHER_DSN", "postgresql://db/ratchet_dispatch")
    monkeypatch.setenv("RATCHET_DISPATCHER_BREAKER_COOLDOWN_S", "2.5")
    config = load()
    assert config.shard_ids == [2, 3] and config.host_token_sha256 == [H]
    assert config.dsn == "postgresql://db/ratchet_dispatch" and config.breaker_cooldown_s == 2.5


def test_required_fields_are_named():
    with pytest.raises(ConfigError, match="history_target"):
        load(overrides={"shard_ids": [0], "host_token_sha256": [H], "dsn": "postgresql://db/x"})
    with pytest.raises(ConfigError, match="dsn"):
        load(overrides={"history_target": "127.0.0.1:1", "shard_ids": [0], "host_token_sha256": [H]})


def test_token_verifier():
    verifier = TokenVerifier([hashlib.sha256(b"other").hexdigest(), H])
    verifier.verify([("authorization", "Bearer tok")])
    verifier.verify([("Authorization", b"bearer tok")])
    for metadata, fragment in [(None, "missing"), ([("authorization", "Bearer nope")], "not accepted"),
                               ([("authorization", "tok")], "malformed"),
                               ([("authorization", "Bearer ")], "malformed")]:
        with pytest.raises(Unauthenticated, match=fragment):
            verifier.verify(metadata)
