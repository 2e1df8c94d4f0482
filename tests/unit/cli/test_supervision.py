"""The supervisor restarts what died on its own, with growing, capped backoff."""

from __future__ import annotations

import threading

from ratchet.cli import supervision
from ratchet.cli.supervision import Supervisor


class _Proc:
    def __init__(self, pid, code=None):
        self.pid, self.returncode = pid, code

    def poll(self):
        return self.returncode


class _Platform:
    def __init__(self):
        self._lock = threading.RLock()
        self._held: set[str] = set()
        self.procs = {"history": _Proc(1), "hostagent": _Proc(2)}
        self.spawned: list[str] = []

    def _spawn(self, name):
        self.spawned.append(name)
        self.procs[name] = _Proc(100 + len(self.spawned))
        return self.procs[name]


def _clock(monkeypatch, start=1000.0):
    now = [start]
    monkeypatch.setattr(supervision.time, "monotonic", lambda: now[0])
    return now


def test_restart_waits_out_a_doubling_capped_backoff(monkeypatch):
    now = _clock(monkeypatch)
    p = _Platform()
    s = Supervisor(p)
    s._started_at = {"history": now[0], "hostagent": now[0]}
    delays = []
    for _ in range(7):
        p.procs["hostagent"].returncode = -9  # it keeps crashing right after start
        s.check()
        due = s._due["hostagent"]
        delays.append(round(due - now[0], 3))
        now[0] = due - 0.01
        s.check()
        assert p.spawned.count("hostagent") == len(delays) - 1  # not before the backoff
        now[0] = due
        s.check()
        assert p.spawned.count("hostagent") == len(delays)
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert s.restarts == {"hostagent": 7} and "history" not in p.spawned


def test_backoff_resets_after_a_stable_run(monkeypatch):
    now = _clock(monkeypatch)
    p = _Platform()
    s = Supervisor(p)
    s._started_at = {"hostagent": now[0]}
    s._backoff["hostagent"] = 8.0
    now[0] += supervision.STABLE_AFTER_S + 1
    p.procs["hostagent"].returncode = 1
    s.check()
    assert s._due["hostagent"] - now[0] == supervision.BACKOFF_FIRST_S


def test_held_services_are_left_down(monkeypatch):
    now = _clock(monkeypatch)
    p = _Platform()
    p._held.add("hostagent")
    p.procs["hostagent"].returncode = 0
    s = Supervisor(p)
    for _ in range(3):
        s.check()
        now[0] += 60
    assert p.spawned == []
