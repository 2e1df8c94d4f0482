"""History's config validation and the WatchReady hub (no I/O)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from ratchet.libs.config import ConfigError
from ratchet.services.history.config import HistoryConfig, load
from ratchet.services.history.ready import ReadyHub

DSN = "postgresql://u@127.0.0.1:5432/s"


def test_defaults_and_required_shards(tmp_path):
    cfg = load(None, shards={"0": DSN, "1": DSN})
    assert cfg.shard_dsns == {0: DSN, 1: DSN}
    assert (cfg.host, cfg.grpc_port, cfg.lease_duration_s, cfg.cancel_grace_s) == ("127.0.0.1", 0, 30.0, 30.0)
    assert cfg.idempotency_window_s == 86400.0 and cfg.pool_max_size == 8 and cfg.log_level == "INFO"
    assert cfg.wal_compression == "lz4"
    with pytest.raises(ConfigError, match="shards"):
        load(None)


@pytest.mark.parametrize("over, needle", [
    ({"shards": {"x": DSN}}, "shard ids are integers"),
    ({"shards": {"1": "mysql://x"}}, "shards\\[1\\]"),
    ({"shards": {"1": DSN}, "lease_duration_s": 0}, "lease_duration_s"),
    ({"shards": {"1": DSN}, "wal_compression": "gzip"}, "'wal_compression' must be one of 'lz4'"),
])
def test_bad_values_name_the_field(over, needle):
    with pytest.raises(ConfigError, match=needle):
        load(None, **over)


def test_file_and_env_override(tmp_path, monkeypatch):
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"shards": {"3": DSN}, "grpc_port": 5000}))
    monkeypatch.setenv("RATCHET_HISTORY_GRPC_PORT", "6000")
    cfg = load(path)
    assert cfg.grpc_port == 6000 and cfg.shard_dsns == {3: DSN}
    with pytest.raises(ConfigError, match="unknown config field"):
        path.write_text(json.dumps({"shards": {"3": DSN}, "bogus": 1}))
        load(path)


def test_a_config_that_still_sets_guards_is_refused(tmp_path):
    """The guard switches are gone (history has one path, the guarded one; the fault tests build
    their broken histories in tests/fault/mutants): a config naming them fails to load."""
    assert "guards" not in {f.name for f in dataclasses.fields(HistoryConfig)}
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"shards": {"3": DSN}, "guards": {"epoch_check_on_complete": False}}))
    with pytest.raises(ConfigError, match=r"unknown config field\(s\) \['guards'\] for HistoryConfig"):
        load(path)


def test_config_is_frozen():
    cfg = HistoryConfig(shards={"1": DSN})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.grpc_port = 1  # type: ignore[misc]  # frozen on purpose


async def test_hub_coalesces_per_shard_and_filters_by_watch():
    hub = ReadyHub()
    a, b = hub.watch([1, 2], wanted=True), hub.watch([2], wanted=True)
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


async def test_a_watcher_gets_events_only_while_wanted_and_every_shard_when_it_starts_wanting():
    hub = ReadyHub()
    w = hub.watch([0, 1])  # not wanted until the stream says so
    hub.publish(1)
    assert w.dropped == 1 and not w._event.is_set()
    w.want(True)  # work may have arrived unannounced: every watched shard once
    assert await asyncio.wait_for(w.next(), 1) == [0, 1]
    hub.publish(1)
    assert await asyncio.wait_for(w.next(), 1) == [1]
    w.want(False)
    hub.publish(0)
    assert w.dropped == 2


def test_a_commit_that_wrote_a_timer_tells_the_timer_loop():
    hub, heard = ReadyHub(), []
    hub.timer_due(0, 5.0)  # no loop connected yet: nobody to tell, no error
    hub.on_timer = lambda shard, seconds: heard.append((shard, seconds))
    hub.timer_due(1, 3.0)
    hub.timer_due(1, None)  # wrote no timer
    assert heard == [(1, 3.0)]


async def test_a_shard_connecting_late_wakes_whoever_waits_on_it():
    from ratchet.services.history.loops.shard_connect import ShardConnectLoop

    class _Late:
        id, available = 3, False

        async def connect(self):
            self.available = True
            return True

    class _Set:
        def __init__(self):
            self.shard = _Late()

        def unavailable(self):
            return [] if self.shard.available else [self.shard]

    woken = asyncio.Event()
    task = asyncio.create_task(ShardConnectLoop(_Set(), interval_s=0.01, on_connected=woken.set).run())
    try:
        await asyncio.wait_for(woken.wait(), 2)
    finally:
        task.cancel()
        await asyncio.wait([task])
