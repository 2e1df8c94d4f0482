"""The workload: client threads that enqueue a mix of tasks, read and cancel
them, and record every operation as invoke / ok / fail / info.

Mix: immediate, delayed, retried (flaky), failing, fatal, crashing, cancelled
and idempotent (a keyed request sent again) enqueues, small batches (keyed, or
plain: no keys, one type, no options), reads and cancels; with
`workflow_every`, workflow starts too (the app's `flow`: steps, a durable
sleep, a wait for an event), each then sent its event "go" at a random moment
(before, during or after its wait; some never, so the wait times out) and a
few cancelled, all recorded like the rest. Each logical request
has an op id carried in its payload, which is how the checker finds the task
of an ambiguous enqueue. An error that proves
nothing happened (invalid, not found, conflict) is `fail`; a timeout or an
unavailable platform is `info` (ambiguous), and an ambiguous keyed enqueue is
retried later with the same key and request.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
import threading
import time
from typing import Any

from ratchet.client import batch_request

from .recorder import Recorder

DEFINITE = {"INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "ABORTED", "PERMISSION_DENIED",
            "UNAUTHENTICATED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "OUT_OF_RANGE"}
TASK_TYPE = "work"

# name -> (weight, payload fields, expected terminal states, enqueue options)
MIX: dict[str, tuple[int, dict, tuple[str, ...], dict]] = {
    "immediate": (30, {"mode": "ok", "sleep": 0.05}, ("SUCCEEDED",), {}),
    "slow": (8, {"mode": "ok", "sleep": 1.0}, ("SUCCEEDED",), {}),
    "delayed": (12, {"mode": "ok", "sleep": 0.05}, ("SUCCEEDED",), {"delay": "1s"}),
    "flaky": (10, {"mode": "flaky", "succeed_on": 3}, ("SUCCEEDED",), {}),
    "failing": (6, {"mode": "fail"}, ("FAILED",), {"retry": {"max_attempts": 3, "base": "100ms", "cap": "200ms"}}),
    "fatal": (4, {"mode": "fatal"}, ("FAILED",), {}),
    "crashing": (4, {"mode": "crash", "succeed_on": 2}, ("SUCCEEDED",), {"task_type": "crashy"}),
    "cancelled": (8, {"mode": "ok", "sleep": 3.0}, ("SUCCEEDED", "CANCELED"), {}),
}


WORKFLOW_TYPE = "flow"
# The workflow's script for its `reserve` step (tests/fault/app/app.py) -> weight; every run is expected
# to succeed (a fatal step is caught by the workflow), or to be CANCELED when the client cancels it.
WORKFLOW_MODES = {"ok": 50, "slow": 20, "flaky": 12, "fatal": 10, "crash": 4}
EVENT_SHARE = 0.75  # runs sent their event (the others' waits time out)
CANCEL_SHARE = 0.1  # runs cancelled by their client
EVENT_AFTER_S = (0.0, 3.0)  # when the event is sent after the start: before, during or after the wait
CANCEL_AFTER_S = (0.5, 2.5)


@dataclasses.dataclass
class WorkloadConfig:
    clients: int = 3
    think_s: tuple[float, float] = (0.05, 0.25)
    request_timeout_s: float = 5.0
    batch_every: int = 9  # about one op in this many is a small batch
    mix: dict = dataclasses.field(default_factory=lambda: dict(MIX))
    workflow_every: int = 0  # about one op in this many starts a workflow run (0: none)
    workflow_modes: dict = dataclasses.field(default_factory=lambda: dict(WORKFLOW_MODES))
    workflow_payload: dict = dataclasses.field(default_factory=dict)  # extra payload fields (e.g. slow_s)
    workflow_cancel_share: float = CANCEL_SHARE  # runs cancelled by their client


class ClientProcess:
    """One logical client (a thread with its own connection and RNG)."""

    def __init__(self, name: str, client, recorder: Recorder, rng: random.Random, ledger: str,
                 cfg: WorkloadConfig, counter):
        self.name, self.client, self.rec, self.rng = name, client, recorder, rng
        self.ledger, self.cfg, self.counter = ledger, cfg, counter
        self.acked: list[str] = []
        self.cancellable: list[str] = []
        self.keyed: list[dict] = []  # requests that may be sent again with the same key
        self.retry_later: list[dict] = []  # ambiguous keyed enqueues and workflow starts
        self.due: list[tuple[float, int, str, str, str]] = []  # (when, seq, "event"|"cancel", run id, op id)

    # -- one operation ---------------------------------------------------------------
    def call(self, f: str, value: dict, fn) -> tuple[str, Any]:
        self.rec.event(self.name, "invoke", f, value)
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - classified: only errors that prove nothing happened are `fail`
            code = getattr(e, "code", None) or type(e).__name__
            kind = "fail" if code in DEFINITE else "info"
            self.rec.event(self.name, kind, f, {"code": code, "error": str(e)[:300], **_ids(value)})
            return kind, e
        self.rec.event(self.name, "ok", f, result)
        return "ok", result

    def new_request(self) -> dict:
        names = list(self.cfg.mix)
        kind = self.rng.choices(names, weights=[self.cfg.mix[n][0] for n in names])[0]
        _, fields, expect, options = self.cfg.mix[kind]
        op_id = f"{self.name}-{next(self.counter)}"
        return {"op": op_id, "kind": kind, "task_type": TASK_TYPE, "expect": list(expect),
                "key": f"k-{op_id}", "payload": {"op": op_id, "ledger": self.ledger, **fields}, **options}

    def submit(self, req: dict) -> None:
        """A request sent again (an ambiguous one, or an idempotent duplicate): same key, same op."""
        if req.get("kind") == "workflow":
            self.start_workflow(req)
        else:
            self.enqueue(req)

    def new_workflow(self) -> dict:
        modes = self.cfg.workflow_modes
        mode = self.rng.choices(list(modes), weights=list(modes.values()))[0]
        op_id = f"{self.name}-{next(self.counter)}"
        cancel = self.rng.random() < self.cfg.workflow_cancel_share
        return {"op": op_id, "kind": "workflow", "workflow_type": WORKFLOW_TYPE, "cancel": cancel,
                "expect": ["SUCCEEDED", "CANCELED"] if cancel else ["SUCCEEDED"], "key": f"k-{op_id}",
                "event": self.rng.random() < EVENT_SHARE,
                "payload": {"op": op_id, "ledger": self.ledger, "mode": mode, "nap": 0.3, "wait_s": 2.5,
                            **self.cfg.workflow_payload}}

    def start_workflow(self, req: dict) -> None:
        """Start a run (keyed: a resend returns the same run), then plan its event and cancel."""
        kind, res = self.call("start_workflow", _public(req), lambda: {"op": req["op"], "task_id": (
            self.client.start_workflow(req["workflow_type"], req["payload"], idempotency_key=req["key"]))})
        if kind == "info":
            self.retry_later.append(req)
        if kind != "ok":
            return
        run_id = res["task_id"]
        if run_id not in self.acked:
            self.acked.append(run_id)
            self.keyed.append({**req, "task_id": run_id})
            now = time.monotonic()
            if req["event"]:
                self._plan(now + self.rng.uniform(*EVENT_AFTER_S), "event", run_id, req["op"])
            if req["cancel"]:
                self._plan(now + self.rng.uniform(*CANCEL_AFTER_S), "cancel", run_id, req["op"])

    def _plan(self, when: float, what: str, run_id: str, op_id: str) -> None:
        heapq.heappush(self.due, (when, next(self.counter), what, run_id, op_id))

    def send_event(self, run_id: str, op_id: str) -> None:
        """The run's event "go", whose data its wait matches (op); n makes each send's data unique."""
        data = {"op": op_id, "n": next(self.counter)}
        self.call("send_workflow_event", {"task_id": run_id, "name": "go", "data": data},
                  lambda: {"task_id": run_id, "delivered": self.client.send_workflow_event(run_id, "go", data)})

    def due_now(self) -> bool:
        """Send the first planned event or cancel whose time has come; False if none has."""
        if not self.due or self.due[0][0] > time.monotonic():
            return False
        _, _, what, run_id, op_id = heapq.heappop(self.due)
        if what == "event":
            self.send_event(run_id, op_id)
        else:
            self.cancel(run_id)
        return True

    def enqueue(self, req: dict) -> None:
        kind, res = self.call("enqueue", _public(req), lambda: {"op": req["op"], "task_id": self.client.enqueue(
            req["task_type"], req["payload"], idempotency_key=req["key"], delay=req.get("delay"),
            retry=req.get("retry"), timeouts=req.get("timeouts"))})
        if kind == "ok":
            self.acked.append(res["task_id"])
            self.keyed.append({**req, "task_id": res["task_id"]})
            if req["kind"] == "cancelled":
                self.cancellable.append(res["task_id"])
        elif kind == "info":
            self.retry_later.append(req)

    def enqueue_batch(self) -> None:
        if self.rng.random() < 0.5:
            self.enqueue_plain_batch()
            return
        reqs = [self.new_request() for _ in range(self.rng.randint(2, 4))]
        items = [{"task_type": r["task_type"], "payload": r["payload"], "idempotency_key": r["key"],
                  **({"delay": r["delay"]} if r.get("delay") else {}),
                  **({"retry": r["retry"]} if r.get("retry") else {}),
                  **({"timeouts": r["timeouts"]} if r.get("timeouts") else {})} for r in reqs]
        kind, res = self.call("enqueue_batch", {"items": [_public(r) for r in reqs]},
                              lambda: {"task_ids": self.client.enqueue_batch(items)})
        if kind == "ok":
            for r, tid in zip(reqs, res["task_ids"], strict=True):
                self.acked.append(tid)
                if r["kind"] == "cancelled":
                    self.cancellable.append(tid)
        elif kind == "info":
            self.retry_later.extend(reqs)

    def enqueue_plain_batch(self) -> None:
        """A batch with no keys, one type and no options: the gateway's plain path (ids and JSON
        payloads as columns, one statement in history). The SDK mints the task ids, and its own
        retries resend them unchanged; an ambiguous outcome is left as it is (no key to resend
        with), so the checker allows zero or one task for each of its ops."""
        want, reqs = self.rng.randint(2, 8), []
        for _ in range(50 * want):  # most kinds qualify: bounded, never short in practice
            r = self.new_request()
            if not any(k in r for k in ("delay", "retry", "timeouts")) and r["task_type"] == TASK_TYPE:
                reqs.append({**r, "key": None})
                if len(reqs) == want:
                    break
        req = batch_request([{"task_type": r["task_type"], "payload": r["payload"]} for r in reqs])
        # The ids the SDK minted: resends carry them, so each op has at most this one task.
        value = {"plain": True, "items": [{**_public(r), "minted_id": t.task_id}
                                          for r, t in zip(reqs, req.tasks, strict=True)]}
        kind, res = self.call("enqueue_batch", value,
                              lambda: {"task_ids": list(self.client.send_enqueue_batch(req).task_ids)})
        if kind == "ok":
            for r, tid in zip(reqs, res["task_ids"], strict=True):
                self.acked.append(tid)
                if r["kind"] == "cancelled":
                    self.cancellable.append(tid)

    def get(self, task_id: str, process: str | None = None) -> str | None:
        def read():
            info = self.client.get(task_id)
            return {"task_id": task_id, "state": info.state, "version": info.version, "attempt": info.attempt}
        kind, res = self.call("get", {"task_id": task_id}, read)
        return res["state"] if kind == "ok" else None

    def cancel(self, task_id: str) -> None:
        self.call("cancel", {"task_id": task_id},
                  lambda: {"task_id": task_id, "state": _state_name(self.client.cancel(task_id))})

    def step(self) -> None:
        """One operation chosen by the RNG."""
        if self.due_now():
            return
        r = self.rng.random()
        if self.retry_later and r < 0.5:
            self.submit(self.retry_later.pop(0))  # same op id, key and request: at most one task
        elif self.cancellable and r < 0.12:
            self.cancel(self.cancellable.pop(self.rng.randrange(len(self.cancellable))))
        elif self.keyed and r < 0.18:
            self.submit(dict(self.rng.choice(self.keyed)))  # an idempotent duplicate
        elif self.acked and r < 0.40:
            self.get(self.rng.choice(self.acked[-20:]))
        elif self.cfg.workflow_every and self.rng.randrange(self.cfg.workflow_every) == 0:
            self.start_workflow(self.new_workflow())
        elif self.rng.randrange(self.cfg.batch_every) == 0:
            self.enqueue_batch()
        else:
            self.enqueue(self.new_request())


def _public(req: dict) -> dict:
    """What the history records of a request (the ledger path is noise)."""
    return {k: v for k, v in req.items() if k not in ("payload", "task_id")} | {
        "mode": req["payload"].get("mode")}


def _ids(value: dict) -> dict:
    return {k: value[k] for k in ("op", "task_id") if k in value}


def _state_name(state: Any) -> str:
    return getattr(state, "state", state) if not isinstance(state, str) else state


class Workload:
    """Client threads driven until stopped, then a final settling pass."""

    def __init__(self, make_client, recorder: Recorder, seed: int, ledger: str, cfg: WorkloadConfig | None = None):
        import itertools

        self.cfg = cfg or WorkloadConfig()
        self.rec, self.seed, self.make_client, self.ledger = recorder, seed, make_client, ledger
        counter = itertools.count(1)
        # Client c0 sends unary EnqueueTask calls, the others enqueue on the stream (the SDK's
        # default): both paths run under every nemesis.
        self.procs = [ClientProcess(f"c{i}", make_client(self.cfg.request_timeout_s, stream=i > 0), recorder,
                                    random.Random(f"{seed}:c{i}"), ledger, self.cfg, counter)
                      for i in range(self.cfg.clients)]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(p,), name=p.name, daemon=True)
                         for p in self.procs]
        self.errors: list[str] = []

    def start(self) -> Workload:
        for t in self._threads:
            t.start()
        return self

    def _loop(self, proc: ClientProcess) -> None:
        try:
            while not self._stop.is_set():
                proc.step()
                self._stop.wait(proc.rng.uniform(*self.cfg.think_s))
        except Exception as e:  # noqa: BLE001 - a harness bug, not a platform fault: surfaced by the test
            self.errors.append(f"{proc.name}: {type(e).__name__}: {e}")

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)

    def finish_clients(self) -> None:
        """After the heal: each client retries its ambiguous keyed enqueues, sends the events and
        cancels it planned and ends with a read of its newest task, so its last operations show the
        platform is live again."""
        for proc in self.procs:
            for req in list(proc.retry_later):
                proc.submit(req)
            proc.retry_later.clear()
            while proc.due:  # planned events and cancels not yet sent: now (an event may find its run ended)
                proc.due[0] = (0.0, *proc.due[0][1:])
                proc.due_now()
            if proc.acked:
                proc.get(proc.acked[-1])

    def acked(self) -> list[str]:
        return [tid for p in self.procs for tid in p.acked]

    def settle(self, timeout_s: float, poll_s: float = 0.5) -> list[str]:
        """Read every acked task (process `final`) until all are terminal or time is up.
        Returns the ids still not terminal."""
        reader = ClientProcess("final", self.make_client(self.cfg.request_timeout_s), self.rec,
                               random.Random(self.seed), self.ledger, self.cfg, iter(()))
        pending = list(dict.fromkeys(self.acked()))
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            still = []
            for tid in pending:
                state = reader.get(tid)
                if state not in ("SUCCEEDED", "FAILED", "CANCELED", "EXPIRED"):
                    still.append(tid)
            pending = still
            if pending:
                time.sleep(poll_s)
        return pending

    def close(self) -> None:
        for p in self.procs:
            try:
                p.client.close()
            except Exception:  # noqa: BLE001 - at the end of a run: one client's close must not keep the rest open
                pass
