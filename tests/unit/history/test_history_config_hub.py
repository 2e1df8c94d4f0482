"""History's config validation and the WatchReady hub (no I/O)."""

from __future__ import annotations

import asyncio
import json

import pytest

from ratchet.libs.config import ConfigError
from ratchet.services.history.config import Guards, HistoryConfig, load
from ratchet.services.history.ready import ReadyHub

DSN = "postgresql://u@127.0.0.1:5432/s"


def test_defaults_and_required_shards(tmp_path):
    cfg = load(None, shards={"0": DSN, "1": DSN})
    assert cfg.shard_dsns == {0: DSN, 1: DSN}
    assert (cfg.host, cfg.grpc_port, cfg.lease_duration_s, cfg.cancel_grace_s) == ("127.0.0.1", 0, 30.0, 30.0)
    assert cfg.idempotency_window_s == 86400.0 and cfg.pool_max_size == 8 and cfg.log_level == "INFO"
    assert cfg.guards == Guards()  # every guard on
    assert cfg.wal_compression == "lz4"
    with pytest.raises(ConfigError, match="shards"):
        load(None)


@pytest.mark.parametrize("over, needle", [
    ({"shards": {"x": DSN}}, "shard ids are integers"),
    ({"shards": {"1": "mysql://x"}}, "shards\\[1\\]"),
    ({"shards": {"1": DSN}, "lease_duration_s": 0}, "lease_duration_s"),
    ({"shards": {"1": DSN}, "guards": {"nope": False}}, "unknown guard"),
    ({"shards": {"1": DSN}, "guards": {"timer_skip_locked": "no"}}, "guards.timer_skip_locked"),
    ({"shards": {"1": DSN}, "wal_compression": "gzip"}, "'wal_compression' must be one of 'lz4'"),
])
def test_bad_values_name_the_field(over, needle):
    with pytest.raises(ConfigError, match=needle):
        load(None, **over)


def test_file_and_env_override(tmp_path, monkeypatch):
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"shards": {"3": DSN}, "grpc_port": 5000, "guards": {"epoch_check_on_complete": False}}))
    monkeypatch.setenv("RATCHET_HISTORY_GRPC_PORT", "6000")
    cfg = load(path)
    assert cfg.grpc_port == 6000 and cfg.shard_dsns == {3: DSN}
    assert cfg.guards.epoch_check_on_complete is False and cfg.guards.timer_skip_locked is True
    with pytest.raises(ConfigError, match="unknown config field"):
        path.write_text(json.dumps({"shards": {"3": DSN}, "bogus": 1}))
        load(path)


def test_config_is_frozen():
    cfg = HistoryConfig(shards={"1": DSN})
    with pytest.raises(Exception):
        cfg.grpc_port = 1  # type: ignore[misc]  # frozen on purpose


async def test_hub_coalesces_per_shard_and_filters_by_watch():
    hub = ReadyHub()
    a, b = hub.watch([1, 2]), hub.watch([2])
    for _ in range(50):
        hub.publish(1)
    hub.publish(2)
    hub.publish(3)
    assert await asyncio.wait_for(a.next(), 1) == [1, 2]  # one event per shard, however many publishes
    assert await asyncio.wait_for(b.next(), 1) == [2]
    hub.publish(2)
    assert await asyncio.wait_for(a.next(), 1) == [2]
    hub.unwatch(b)
    assert hub.watcher_count == 1
    hub.close()
    assert await asyncio.wait_for(a.next(), 1) == []
