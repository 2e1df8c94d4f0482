"""Crafted runs for the checker's own tests: a builder that writes consistent
histories, ledgers and dumps, which each test then breaks in one way."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import json
import uuid

from ratchet.libs.shardmap import new_task_id

# What each lease of a crafted task does: (exit state, attempt outcome, reason, ledger phases)
LEASE_ENDINGS = {
    "ok": ("SUCCEEDED", "SUCCEEDED", None, ["start", "end:ok"]),
    "raise": ("RETRY_WAIT", "FAILED", "RetryableError", ["start", "end:raise"]),
    "crash": ("RETRY_WAIT", "CRASHED", "SandboxCrashed", ["start"]),
    "expire": ("RETRY_WAIT", "LEASE_EXPIRED", "LeaseExpired", ["start", "end:ok"]),
    "lost": ("RETRY_WAIT", "LEASE_EXPIRED", "LeaseExpired", []),
    "fatal": ("FAILED", "FAILED", "FatalError", ["start", "end:fatal"]),
    "exhausted": ("FAILED", "FAILED", "RetryableError", ["start", "end:raise"]),
    "cancel": ("CANCELED", "CANCELED", "Canceled", ["start", "end:cancelled"]),
}


class Builder:
    """Accumulates a run; ``run()`` returns (history, ledger, dump, meta) copies."""

    def __init__(self):
        self.history: list[dict] = []
        self.ledger: list[dict] = []
        self.tables = {"tasks": [], "task_transitions": [], "task_attempts": [], "timers": [],
                       "idempotency_keys": [], "workflow_steps": [], "workflow_waits": [], "workflow_inbox": []}
        self._clock = itertools.count(1)
        self._pid = itertools.count(1000)
        self.cron: dict | None = None  # the cron database's tables, when the run had schedules
        self.meta: dict = {}

    def t(self) -> float:
        return float(next(self._clock))

    # -- history ------------------------------------------------------------
    def op(self, process: str, f: str, value, outcome: str, result=None) -> None:
        self.history.append({"process": process, "type": "invoke", "f": f, "value": value, "time": self.t()})
        self.history.append({"process": process, "type": outcome, "f": f, "value": result, "time": self.t()})

    def nemesis(self, f: str, value=None) -> None:
        self.history.append({"process": "nemesis", "type": "info", "f": f, "value": value, "time": self.t()})

    def enqueue(self, process: str, op_id: str, outcome: str = "ok", task_id: str | None = None,
                key: str | None = None, expect=("SUCCEEDED",), mode: str = "ok") -> str:
        tid = task_id or new_task_id()
        req = {"op": op_id, "task_type": "work", "mode": mode, "expect": list(expect)}
        if key:
            req["key"] = key
        result = {"op": op_id, "task_id": tid} if outcome == "ok" else {"error": "x", "code": "UNAVAILABLE"}
        self.op(process, "enqueue", req, outcome, result)
        return tid

    def get(self, process: str, task_id: str, state: str, version: int, outcome: str = "ok") -> None:
        self.op(process, "get", {"task_id": task_id}, outcome,
                {"task_id": task_id, "state": state, "version": version} if outcome == "ok" else {"code": "NOT_FOUND"})

    # -- the store and the ledger ---------------------------------------------
    def task(self, task_id: str, op_id: str, leases: list[str], key: str | None = None,
             cancel_waiting: bool = False, max_attempts: int = 5) -> None:
        """A task whose life is the given sequence of lease endings."""
        log = [(None, "ENQUEUED", 0, None)]
        attempts = []
        epoch, result = 0, None
        for n, ending in enumerate(leases, start=1):
            exit_state, outcome, reason, phases = LEASE_ENDINGS[ending]
            epoch += 1
            log.append(("ENQUEUED", "LEASED", epoch, None))
            log.append(("LEASED", exit_state, epoch, reason))
            attempts.append({"task_id": task_id, "attempt": n, "lease_epoch": epoch, "outcome": outcome,
                             "error_class": reason, "worker_id": "w1"})
            pid = next(self._pid)
            for phase in phases:
                entry = {"task_id": task_id, "attempt": n, "lease_epoch": epoch, "pid": pid, "time": self.t(),
                         "phase": phase.split(":")[0]}
                if ":" in phase:
                    entry["outcome"] = phase.split(":")[1]
                self.ledger.append(entry)
            if exit_state == "RETRY_WAIT":
                log.append(("RETRY_WAIT", "ENQUEUED", epoch, "timer"))
            if exit_state == "SUCCEEDED":
                result = {"lease_epoch": epoch, "attempt": n, "pid": pid}
        if cancel_waiting:
            log.append((log[-1][1], "CANCELED", epoch, "cancel"))
        for v, (src, dst, ep, reason) in enumerate(log, start=1):
            self.tables["task_transitions"].append({"task_id": task_id, "version": v, "from_state": src,
                                                    "to_state": dst, "lease_epoch": ep, "at": f"t{v}",
                                                    "reason": reason})
        self.tables["task_attempts"].extend(attempts)
        self.tables["tasks"].append({
            "task_id": task_id, "tenant_id": "ten", "app_id": "app", "state": log[-1][1], "version": len(log),
            "attempt": len(leases), "max_attempts": max_attempts, "lease_epoch": epoch,
            "payload": {"op": op_id}, "result": result, "idempotency_key": key, "cancel_requested": False})
        if key:
            self.tables["idempotency_keys"].append({"tenant_id": "ten", "app_id": "app", "idempotency_key": key,
                                                    "task_id": task_id})

    def run(self):
        dump = {"db_now": "now", "shards": {"0": copy.deepcopy(self.tables)}}
        if self.cron is not None:
            dump["cron"] = copy.deepcopy(self.cron)
        return (copy.deepcopy(self.history), copy.deepcopy(self.ledger), dump,
                {"seed": 7, "scenario": "crafted", "run_dir": "/tmp/crafted", **copy.deepcopy(self.meta)})


def final_version(b: Builder, task_id: str) -> tuple[str, int]:
    row = next(r for r in b.tables["tasks"] if r["task_id"] == task_id)
    return row["state"], row["version"]


def clean() -> tuple[Builder, dict]:
    """A run in which every invariant holds, covering each kind of operation and
    each explained kind of re-execution. Returns the builder and the task ids by name."""
    b = Builder()
    ids = {}
    ids["a"] = b.enqueue("c1", "op-a")
    b.task(ids["a"], "op-a", ["ok"])
    b.get("c1", ids["a"], "ENQUEUED", 1)
    b.nemesis("kill", {"target": "sandbox", "pid": 1})
    b.enqueue("c1", "op-b", outcome="info")
    ids["b"] = new_task_id()
    b.task(ids["b"], "op-b", ["crash", "ok"])  # ambiguous, but it was written: must be terminal
    b.enqueue("c1", "op-c", outcome="info")  # ambiguous and absent
    b.enqueue("c1", "op-d", outcome="fail")  # definite failure, absent
    ids["e"] = b.enqueue("c2", "op-e", key="k-e")
    b.enqueue("c2", "op-e", key="k-e", task_id=ids["e"])  # a retry with the same key: same task
    b.task(ids["e"], "op-e", ["expire", "ok"], key="k-e")  # ran twice: lease expired after it returned
    ids["f"] = b.enqueue("c2", "op-f", expect=("FAILED",), mode="fail")
    b.task(ids["f"], "op-f", ["raise", "lost", "exhausted"], max_attempts=3)
    ids["g"] = b.enqueue("c2", "op-g")
    b.op("c2", "cancel", {"task_id": ids["g"]}, "ok", {"task_id": ids["g"], "state": "CANCELED"})
    b.task(ids["g"], "op-g", [], cancel_waiting=True)
    ids["h"] = b.enqueue("c1", "op-h", expect=("FAILED",), mode="fatal")
    b.task(ids["h"], "op-h", ["fatal"])
    b.nemesis("heal", "all")
    for name in ("a", "e", "f", "g", "h"):
        state, version = final_version(b, ids[name])
        b.get("c1" if name in "abh" else "c2", ids[name], state, version)
    return b, ids


# -- cron ------------------------------------------------------------------------
# The crafted run's wall clock at history time 0 (run.json's recorder_wall0): history
# time t is the database-clock instant BASE + t, so nemesis events at t ~ 1000 land
# among the crafted slots at BASE + 1000...
BASE = 1_800_000_000


def iso(seconds: float) -> str:
    """An epoch-seconds instant as the dump writes timestamps."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


def add_schedule(b: Builder, first: int = 1001, count: int = 10, cron: str = "* * * * * *",
                 catchup_ms: int = 3000) -> dict:
    """A schedule created at BASE + first - 0.7 that fired `count` slots a second apart,
    each claimed 20 ms after its time and delivered 60 ms later, each with its task (run to
    success, with its ledger lines), then paused 0.5 s after the last slot.
    Returns {"schedule_id", "slots": {slot second: task_id}}."""
    sid = str(uuid.uuid4())
    created, paused = BASE + first - 0.7, BASE + first + count - 1 + 0.5
    if b.cron is None:
        b.cron = {"db_now": iso(paused + 5), "schedules": [], "schedule_slots": []}
        b.meta.update(recorder_wall0=BASE, cron={"processes": 1, "misfire_grace_s": 2.0, "tick_interval_s": 0.2})
    b.op("cron_admin", "schedule_create", {"index": 0, "cron": cron, "catchup_window_s": catchup_ms / 1000},
         "ok", {"schedule_id": sid, "cron": cron, "created_at": iso(created)})
    slots = {}
    for k in range(first, first + count):
        tid = new_task_id()
        add_slot(b, sid, k, tid)
        slots[k] = tid
    b.cron["schedules"].append({
        "schedule_id": sid, "tenant_id": "ten", "app_id": "app", "cron": cron, "timezone": "UTC",
        "task_template": json.dumps({"taskType": "work", "payload": {"mode": "ok"}}), "overlap_policy": "ALLOW",
        "catchup_window_ms": catchup_ms, "state": "PAUSED", "next_fire_time": None,
        "last_fire_time": iso(BASE + first + count - 1), "last_task_id": slots[first + count - 1],
        "created_at": iso(created), "updated_at": iso(paused)})
    b.op("cron_admin", "schedule_pause", {"schedule_id": sid}, "ok",
         {"schedule_id": sid, "state": "PAUSED", "updated_at": iso(paused)})
    return {"schedule_id": sid, "slots": slots}


def add_slot(b: Builder, sid: str, second: float, task_id: str | None, state: str = "FIRED", kind: str = "CRON",
             claimed: float = 0.02, delivered: float = 0.08) -> dict:
    """One slot at BASE + second, recorded `claimed` s after its time and finished `delivered` s
    after that; a FIRED slot gets its task (keyed as the gateway keys it) unless task_id is None."""
    at = BASE + second
    row = {"schedule_id": sid, "slot": iso(at), "kind": kind, "state": state,
           "task_id": task_id if state == "FIRED" else None, "cancel_task_id": None,
           "reason": "schedule paused" if state == "SKIPPED" else None, "attempts": 1,
           "next_attempt_at": iso(at + claimed), "created_at": iso(at + claimed),
           "finished_at": None if state in ("PENDING", "BUFFERED", "SENDING") else iso(at + claimed + delivered)}
    b.cron["schedule_slots"].append(row)
    if task_id is not None and state == "FIRED":
        add_scheduled_task(b, task_id, sid, at)
    return row


def add_scheduled_task(b: Builder, task_id: str, sid: str, at: float, key: bool = True) -> None:
    """A task cron enqueued for slot `at` of schedule `sid`: no client op, payload without an op id."""
    stamp = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    b.task(task_id, None, ["ok"], key=f"sched:{sid}@{stamp}" if key else None)
    b.tables["tasks"][-1].update(schedule_id=sid, scheduled_time=iso(at))


def drop_task(b: Builder, task_id: str) -> None:
    """Remove every trace of a task from the shards and the ledger."""
    for table in b.tables:
        b.tables[table] = [r for r in b.tables[table] if r.get("task_id") != task_id]
    b.ledger = [e for e in b.ledger if e.get("task_id") != task_id]


def drop_slots(b: Builder, sid: str, seconds) -> None:
    """Remove slots (and their tasks): the cron service never recorded them."""
    wanted = {iso(BASE + s) for s in seconds}
    for row in [r for r in b.cron["schedule_slots"] if r["schedule_id"] == sid and r["slot"] in wanted]:
        if row["task_id"]:
            drop_task(b, row["task_id"])
        b.cron["schedule_slots"].remove(row)


def nemesis_step(b: Builder, step: int, name: str, start: float, healed: float) -> None:
    """A nemesis step at history times start..healed (database clock BASE + t)."""
    b.history += [{"process": "nemesis", "type": "invoke", "f": name, "value": {"step": step, "hold_s": 1},
                   "time": start},
                  {"process": "nemesis", "type": "info", "f": name, "value": {"step": step, "injected": {}},
                   "time": start + 0.01},
                  {"process": "nemesis", "type": "info", "f": f"{name}:healed", "value": {"step": step},
                   "time": healed}]
