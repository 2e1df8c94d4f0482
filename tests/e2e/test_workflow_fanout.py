"""Workflow fan-outs end to end (issue 24): ctx.parallel and ctx.child through the real mesh,
including kills of the dispatcher and of history while a fan-out runs."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import threading
import time

import pytest

from ratchet.client import Unavailable
from ratchet.libs.shardmap import ShardMap

from .conftest import wait_for

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def effects():
    folder = tempfile.mkdtemp(prefix="ratchet-fan-")
    os.chmod(folder, 0o777)
    yield pathlib.Path(folder)
    shutil.rmtree(folder, ignore_errors=True)


def _finished(client, wid: str, timeout: float = 120.0):
    def done():
        try:
            run = client.get_workflow(wid)
        except Unavailable:  # (history is being killed and restarted: ask again, as a user would)
            return None
        return run if run.state in ("SUCCEEDED", "FAILED", "CANCELED", "EXPIRED") else None
    return wait_for(done, timeout=timeout, interval=0.2, what=f"workflow {wid} to finish")


def _children(client, wid: str, position: int) -> list:
    return list(client.iter_workflow_children(wid, position))


def _kill_and_restart(platform, name: str, after_s: float) -> threading.Thread:
    """SIGKILL the service after after_s; the platform's supervisor starts it again."""
    def go():
        time.sleep(after_s)
        platform.kill(name)
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def _check_fan_out(client, wid: str, n: int, effects: pathlib.Path) -> None:
    run = _finished(client, wid, timeout=200)
    assert run.state == "SUCCEEDED", run
    assert run.result == {"sum": n * (n - 1), "after": 1, "errors": []}
    assert (effects / "after").read_text().count("x") == 1  # the parent resumed past the barrier once
    fan = next(s for s in run.steps if s.name == "fan")
    assert (fan.kind, fan.state, fan.child_count, fan.children_done) == ("PARALLEL", "COMPLETED", n, n)
    children = _children(client, wid, fan.position)
    assert [c.index for c in children] == list(range(n))
    assert {c.state for c in children} == {"SUCCEEDED"} and len({c.child_id for c in children}) == n
    after = next(s for s in run.steps if s.name == "after")
    for c in children[:: max(1, n // 50)]:  # every child ended before the parent went on
        assert client.get(c.child_id).finished_at <= after.started_at


def test_a_1000_way_fan_out_survives_a_dispatcher_kill_and_a_history_kill(platform, client, effects):
    n = 1000
    wid = client.start_workflow("fan_out", {"n": n, "dir": str(effects), "child_sleep_s": 0.01})
    killers = [_kill_and_restart(platform, "dispatcher", 1.0), _kill_and_restart(platform, "history", 3.0)]
    for k in killers:
        k.join(timeout=60)
    _check_fan_out(client, wid, n, effects)


def test_a_5000_way_fan_out_spreads_across_shards_through_kills(platform, client, effects):
    n = 5000
    wid = client.start_workflow("fan_out", {"n": n, "dir": str(effects)})
    killers = [_kill_and_restart(platform, "history", 2.0), _kill_and_restart(platform, "dispatcher", 4.0)]
    for k in killers:
        k.join(timeout=60)
    _check_fan_out(client, wid, n, effects)
    shard_map = ShardMap.even(list(range(platform.shards)))
    shards = {shard_map.shard_for_task(c.child_id) for c in _children(client, wid, 0)}
    assert len(shards) == platform.shards  # above 1,000 children, they spread over every shard


def test_collect_keeps_errors_in_place_and_fail_fast_stops_at_the_first(client, effects):
    wid = client.start_workflow("fan_out", {"n": 20, "dir": str(effects), "fail": [3, 7]})
    run = _finished(client, wid)
    assert run.state == "SUCCEEDED" and run.result["errors"] == [3, 7]
    assert run.result["sum"] == sum(2 * i for i in range(20) if i not in (3, 7))
    fast = client.start_workflow("fan_out", {"n": 50, "dir": str(effects), "fail": [0],
                                             "on_failure": "fail_fast", "child_sleep_s": 0.5})
    run = _finished(client, fast)
    assert run.state == "SUCCEEDED" and run.result == {"failed_child": 0}
    children = wait_for(lambda: (lambda cs: cs if all(c.state in ("SUCCEEDED", "FAILED", "CANCELED")
                                                      for c in cs) else None)(_children(client, fast, 0)),
                        timeout=60, what="the siblings to end")
    assert "CANCELED" in {c.state for c in children}  # the siblings still running were cancelled


def test_a_child_workflow_is_awaited_like_a_step(client):
    run = _finished(client, client.start_workflow("parent_of_nap", {}))
    assert run.state == "SUCCEEDED" and run.result == {"child": {"napped": 0.3}}
    [child] = _children(client, run.workflow_id, 0)
    assert client.get_workflow(child.child_id).state == "SUCCEEDED"


def test_cancelling_a_parent_cancels_its_children(client, effects):
    wid = client.start_workflow("fan_out", {"n": 30, "dir": str(effects), "child_sleep_s": 30})
    wait_for(lambda: client.get_workflow(wid).state == "WAITING", timeout=30, what="the parent to wait")
    client.cancel_workflow(wid)
    assert _finished(client, wid).state == "CANCELED"
    children = wait_for(lambda: (lambda cs: cs if all(c.state == "CANCELED" for c in cs) else None)(
        _children(client, wid, 0)), timeout=60, what="every child to be cancelled")
    assert len(children) == 30
