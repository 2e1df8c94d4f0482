"""Crafted workflow runs for the checker's own tests: a run built activation by
activation, as the platform and the fault app would record it (task log,
attempts, timers, step log, waits, inbox, ledger), which each test then breaks
in one way."""

from __future__ import annotations

from ratchet.libs.shardmap import new_task_id

from .histories import BASE, Builder, iso

# The fault app's workflow (tests/fault/app/app.py, LAYOUTS["flow"]).
LAYOUT = [["v", "VERSION"], ["charge", "STEP"], ["nap", "SLEEP"], ["reserve", "STEP"], ["go", "WAIT"],
          ["ship", "STEP"]]
POLICY_ATTEMPTS = 5


class WfRun:
    """One workflow run; call lease(), then checkpoint calls, then an ending, and repeat."""

    def __init__(self, b: Builder, op_id: str, process: str = "c3", task_type: str = "flow"):
        self.b, self.op_id, self.process, self.task_type = b, op_id, process, task_type
        self.id = new_task_id()
        self.log: list[tuple] = [(None, "ENQUEUED", 0, None, iso(BASE + 50.0))]
        self.attempts: list[dict] = []
        self.rows: dict[int, dict] = {}
        self.epoch, self.clock = 0, 100.0 + 1000 * len(b.tables["tasks"])
        self.suspensions = 0
        b.meta.setdefault("workflow_layouts", {})[task_type] = LAYOUT
        b.op(process, "start_workflow", {"op": op_id, "workflow_type": task_type, "expect": ["SUCCEEDED"],
                                         "mode": "ok"}, "ok", {"op": op_id, "task_id": self.id})

    def tick(self) -> float:
        self.clock += 0.1
        return self.clock

    def ledger(self, phase: str, pos: int, **extra) -> None:
        self.b.ledger.append({"task_id": self.id, "phase": phase, "position": pos, "name": LAYOUT[pos][0],
                              "lease_epoch": self.epoch, "attempt": len(self.attempts), "pid": 4000 + self.epoch,
                              "time": BASE + self.tick(), "op": self.op_id, **extra})

    def row(self, pos: int, state: str, **extra) -> dict:
        name, kind = LAYOUT[pos]
        old = self.rows.get(pos, {})
        row = {"workflow_id": self.id, "position": pos, "name": name, "kind": kind, "state": state,
               "lease_epoch": self.epoch, "attempt": old.get("attempt", 1), "result": None, "error_class": None,
               "fatal": False, "wake_at": None, "started_at": iso(BASE + self.tick()),
               "finished_at": None if state == "RUNNING" else iso(BASE + self.tick()), **extra}
        self.rows[pos] = row
        return row

    # -- activations ---------------------------------------------------------
    def lease(self) -> WfRun:
        self.epoch += 1
        self.log.append(("ENQUEUED", "LEASED", self.epoch, None, iso(BASE + self.tick())))
        self.attempts.append({"task_id": self.id, "attempt": len(self.attempts) + 1, "lease_epoch": self.epoch,
                              "outcome": "RUNNING", "error_class": None})
        return self

    def version(self) -> WfRun:
        if 0 not in self.rows:
            self.row(0, "COMPLETED", result=1)
        return self

    def step(self, pos: int, outcome: str = "ok") -> WfRun:
        """A ctx.step: memoized if committed, else claimed and run (ok, raise, fatal, or killed mid-run)."""
        old = self.rows.get(pos)
        if old and (old["state"] == "COMPLETED" or old["fatal"]):
            self._done(pos, old)
            return self
        attempt = old["attempt"] + 1 if old else 1
        self.row(pos, "RUNNING", attempt=attempt)
        self.ledger("step", pos, step_attempt=attempt)
        if outcome == "killed":
            return self
        self.ledger("step_end", pos, step_attempt=attempt, outcome=outcome)
        if outcome == "ok":
            result = {"position": pos, "name": LAYOUT[pos][0], "lease_epoch": self.epoch, "step_attempt": attempt}
            self._done(pos, self.row(pos, "COMPLETED", attempt=attempt, result=result))
        else:
            self.row(pos, "FAILED", attempt=attempt, fatal=outcome == "fatal",
                     error_class="FatalError" if outcome == "fatal" else "RetryableError")
            if outcome == "fatal":
                self._done(pos, self.rows[pos])
        return self

    def _done(self, pos: int, row: dict) -> None:
        res = row["result"] or {}
        self.ledger("step_done", pos, outcome="fatal" if row["state"] == "FAILED" else "ok",
                    result_epoch=res.get("lease_epoch"), result_attempt=res.get("step_attempt"))

    def sleep(self, pos: int = 2) -> WfRun:
        """The sleep: suspends the first time, completed once its wake timer fired."""
        if pos in self.rows:
            self.rows[pos].update(state="COMPLETED", finished_at=iso(BASE + self.tick()))
            return self
        return self._suspend(self.row(pos, "RUNNING", wake_at=iso(BASE + self.clock + 0.3)), timer=True)

    def wait(self, pos: int = 4, timeout: float | None = 3.0) -> WfRun:
        """The wait: suspends unless an event completed (or a timeout failed) it."""
        if pos in self.rows:
            return self
        wake = None if timeout is None else iso(BASE + self.clock + timeout)
        self.row(pos, "RUNNING", wake_at=wake)
        self.b.tables["workflow_waits"].append({"workflow_id": self.id, "position": pos, "tenant_id": "ten",
                                                "name": LAYOUT[pos][0], "match": {"op": self.op_id}})
        return self._suspend(self.rows[pos], timer=timeout is not None)

    def _suspend(self, row: dict, timer: bool) -> WfRun:
        self.suspensions += 1
        self._end_attempt("SUSPENDED")
        self.log.append(("LEASED", "WAITING", self.epoch, "suspended", iso(BASE + self.tick())))
        self._timer = timer
        return self

    def deliver(self, data: dict | None = None, pos: int = 4, send: bool = True) -> WfRun:
        """A client's event into the inbox, consumed by the open wait (which wakes the run)."""
        data = data or {"op": self.op_id, "n": 1}
        if send:
            self.b.op(self.process, "send_workflow_event", {"task_id": self.id, "name": "go", "data": data}, "ok",
                      {"task_id": self.id, "delivered": True})
        at = iso(BASE + self.tick())
        self.b.tables["workflow_inbox"].append({"workflow_id": self.id, "seq": len(self.b.tables["workflow_inbox"]),
                                                "name": "go", "data": data, "received_at": at,
                                                "consumed_by": pos, "consumed_at": at})
        self.rows[pos].update(state="COMPLETED", result=data, finished_at=at)
        self.b.tables["workflow_waits"] = [w for w in self.b.tables["workflow_waits"]
                                           if not (w["workflow_id"] == self.id and w["position"] == pos)]
        return self.wake("event")

    def time_out(self, pos: int = 4) -> WfRun:
        """The wait's timeout fired: the step fails (TimeoutError, fatal) and the run wakes."""
        self.rows[pos].update(state="FAILED", error_class="TimeoutError", fatal=True,
                              finished_at=self.rows[pos]["wake_at"])
        self.b.tables["workflow_waits"] = [w for w in self.b.tables["workflow_waits"]
                                           if not (w["workflow_id"] == self.id and w["position"] == pos)]
        return self.wake("timer")

    def wake(self, reason: str = "timer") -> WfRun:
        self.log.append(("WAITING", "ENQUEUED", self.epoch, reason, iso(BASE + self.tick())))
        return self

    def _end_attempt(self, outcome: str, error_class: str | None = None) -> None:
        self.attempts[-1].update(outcome=outcome, error_class=error_class)

    def expire(self, outcome: str = "LEASE_EXPIRED", reason: str = "LeaseExpired") -> WfRun:
        """The activation's lease died (expired, crashed, failed): retried after a backoff."""
        self._end_attempt(outcome, reason)
        self.log.append(("LEASED", "RETRY_WAIT", self.epoch, reason, iso(BASE + self.tick())))
        self.log.append(("RETRY_WAIT", "ENQUEUED", self.epoch, "timer", iso(BASE + self.tick())))
        return self

    def succeed(self) -> WfRun:
        self._end_attempt("SUCCEEDED")
        self.log.append(("LEASED", "SUCCEEDED", self.epoch, None, iso(BASE + self.tick())))
        return self

    def cancel(self) -> WfRun:
        """A client cancels it while WAITING: its waits and timers go."""
        self.b.op(self.process, "cancel", {"task_id": self.id}, "ok", {"task_id": self.id, "state": "CANCELED"})
        self.log.append(("WAITING", "CANCELED", self.epoch, "cancel", iso(BASE + self.tick())))
        self.b.tables["workflow_waits"] = [w for w in self.b.tables["workflow_waits"] if w["workflow_id"] != self.id]
        self._timer = False
        return self

    # -- into the builder --------------------------------------------------------
    def finish(self, read: bool = True) -> str:
        b, tid = self.b, self.id
        for v, (src, dst, ep, reason, at) in enumerate(self.log, start=1):
            b.tables["task_transitions"].append({"task_id": tid, "version": v, "from_state": src, "to_state": dst,
                                                 "lease_epoch": ep, "at": at, "reason": reason})
        b.tables["task_attempts"].extend(self.attempts)
        state = self.log[-1][1]
        result = None
        if state == "SUCCEEDED":
            result = {"op": self.op_id, "steps": {str(p): r["result"] for p, r in self.rows.items()
                                                  if r["kind"] == "STEP" and r["state"] == "COMPLETED"}}
        b.tables["tasks"].append({
            "task_id": tid, "tenant_id": "ten", "app_id": "app", "task_type": self.task_type, "state": state,
            "version": len(self.log), "attempt": len(self.attempts), "max_attempts": POLICY_ATTEMPTS + self.suspensions,
            "lease_epoch": self.epoch, "payload": {"op": self.op_id}, "result": result, "idempotency_key": None,
            "cancel_requested": state == "CANCELED"})
        b.tables["workflow_steps"].extend(self.rows[p] for p in sorted(self.rows))
        if state == "WAITING" and getattr(self, "_timer", False):
            b.tables["timers"].append({"task_id": tid, "kind": "wake", "fire_at": None})
        if read:
            b.get(self.process, tid, state, len(self.log))
        return tid


def with_workflow_tables(b: Builder) -> Builder:
    for t in ("workflow_steps", "workflow_waits", "workflow_inbox"):
        b.tables.setdefault(t, [])
    return b


def happy(b: Builder, op_id: str = "wf-1") -> WfRun:
    """Three activations: sleep, then a wait its event completes, then success."""
    r = WfRun(with_workflow_tables(b), op_id)
    r.lease().version().step(1).sleep().wake()
    r.lease().version().step(1).sleep().step(3).wait()
    r.deliver()
    r.lease().version().step(1).sleep().step(3).wait().step(5).succeed()
    return r


def rerun_after_expiry(b: Builder, op_id: str = "wf-2") -> WfRun:
    """The activation dies inside `reserve` (its lease expires): the next claims it again, attempt 2;
    the wait times out (handled: the workflow goes on)."""
    r = WfRun(with_workflow_tables(b), op_id)
    r.lease().version().step(1).sleep().wake()
    r.lease().version().step(1).sleep().step(3, "killed").expire()
    r.lease().version().step(1).sleep().step(3).wait()
    r.time_out()
    r.lease().version().step(1).sleep().step(3).wait().step(5).succeed()
    return r
