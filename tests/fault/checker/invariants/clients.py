"""Invariants over what clients saw: monotone reads consistent with the log (P2),
one task per idempotency key, and liveness once every fault is healed."""

from __future__ import annotations

from collections import defaultdict

from .. import statemachine as sm
from ..core import Result, invariant
from ..model import Run, norm_state


def _reads(run: Run):
    """(op, task_id, state, version|None) for every successful read of a task's state."""
    for op in run.ops:
        if not op.ok or op.f not in ("get", "cancel", "wait"):
            continue
        r = op.result or {}
        tid = r.get("task_id") or (op.value or {}).get("task_id")
        state = norm_state(r.get("state"))
        if tid and state:
            version = r.get("version") if op.f != "cancel" else None
            yield op, tid, state, (int(version) if version not in (None, "") else None)


@invariant("monotonic_reads", "P2")
def monotonic_reads(run: Run, res: Result) -> None:
    """A client never reads an older version or state of a task after a newer one."""
    last: dict[tuple[str, str], tuple] = {}
    for op, tid, state, version in _reads(run):
        res.checked += 1
        key = (op.process, tid)
        prev = last.get(key)
        if prev is not None:
            p_op, p_state, p_version = prev
            went_back = (version is not None and p_version is not None and
                         (version < p_version or (version == p_version and state != p_state)))
            left_terminal = sm.is_terminal(p_state) and state != p_state
            if went_back or left_terminal:
                res.violation(f"{op.process} read {state} v{version} after {p_state} v{p_version}", tid,
                              earlier=p_op.brief(), later=op.brief())
        if version is not None or prev is None or prev[2] is None:
            last[key] = (op, state, version)
        else:  # a cancel answer carries no version: keep the last versioned read
            last[key] = (op, state, prev[2])


@invariant("reads_match_log", "P2")
def reads_match_log(run: Run, res: Result) -> None:
    """Every state a client read is one the task's log went through (at that version), and an
    acknowledged task is never answered NOT_FOUND."""
    for op, tid, state, version in _reads(run):
        res.checked += 1
        log = run.dump.transitions.get(tid, [])
        if not log:
            res.violation(f"{op.process} read {state} of a task with no log", tid, read=op.brief())
            continue
        if version is not None:
            at = [t for t in log if t.version == version]
            if not at or at[-1].to_state != state:
                res.violation(f"{op.process} read {state} at v{version}; the log has "
                              f"{at[-1].to_state if at else 'no such version'}", tid, read=op.brief())
        elif state not in {t.to_state for t in log}:
            res.violation(f"{op.process} was told {state}, a state the task never had", tid, read=op.brief())
    acked = {i.task_id for i in run.items if i.op.ok}
    for op in run.ops:
        code = str((op.result or {}).get("code", "")).upper() if op.type == "fail" else ""
        tid = (op.value or {}).get("task_id")
        if op.f in ("get", "cancel") and code in ("NOT_FOUND", "404") and tid in acked:
            ack = next(i.op for i in run.items if i.task_id == tid)
            if ack.complete_time is not None and op.invoke_time >= ack.complete_time:
                res.violation(f"{op.process} got NOT_FOUND for an acknowledged task", tid, read=op.brief())


@invariant("idempotency", "P1")
def idempotency(run: Run, res: Result) -> None:
    """One task per idempotency key: every ack of a key names the same task, and the store holds one."""
    acked: dict[tuple, set[str]] = defaultdict(set)
    for item in run.items:
        if item.key:
            tenant = item.request.get("tenant")
            if item.op.ok and item.task_id:
                acked[(tenant, item.key)].add(item.task_id)
            acked.setdefault((tenant, item.key), set())
    for (_tenant, key), ids in acked.items():
        res.checked += 1
        if len(ids) > 1:
            res.violation(f"key {key!r} was acknowledged with {len(ids)} different task ids", sorted(ids)[0],
                          task_ids=sorted(ids))
    stored: dict[tuple, list[str]] = defaultdict(list)
    for task in run.dump.tasks.values():
        if task.idempotency_key:
            stored[(task.tenant_id, task.app_id, task.idempotency_key)].append(task.task_id)
    for (_tenant, _app, key), ids in stored.items():
        if len(ids) > 1:
            res.violation(f"key {key!r} has {len(ids)} tasks in the store", sorted(ids)[0], task_ids=sorted(ids))
    for (_tenant, key), ids in acked.items():
        in_store = [t.task_id for t in run.dump.tasks.values() if t.idempotency_key == key]
        if ids and in_store and set(in_store) != ids:
            res.violation(f"key {key!r} was acknowledged as {sorted(ids)} but the store has {in_store}",
                          sorted(ids)[0])
    keys: dict[tuple, set[str]] = defaultdict(set)
    for _, row in run.dump.table("idempotency_keys"):
        k = (row.get("tenant_id"), row.get("app_id"), row.get("idempotency_key") or row.get("key"))
        keys[k].add(str(row.get("task_id")))
    for k, ids in keys.items():
        if len(ids) > 1:
            res.violation(f"idempotency_keys maps {k[2]!r} to {len(ids)} tasks", sorted(ids)[0], task_ids=sorted(ids))


@invariant("liveness_after_heal", "P1")
def liveness_after_heal(run: Run, res: Result) -> None:
    """After the final heal every client completes operations again: its last operation succeeds,
    and its last read of each acknowledged task shows a terminal state."""
    heal = run.final_heal_time()
    by_proc = defaultdict(list)
    for op in run.ops:
        by_proc[op.process].append(op)
    for proc, ops in sorted(by_proc.items()):
        res.checked += 1
        after = [op for op in ops if heal is None or op.invoke_time >= heal]
        if heal is not None and not after:
            res.violation(f"{proc} did nothing after the final heal at t={heal:.2f}")
        elif not after[-1].ok:
            res.violation(f"{proc}'s last operation ({after[-1].f}) ended {after[-1].type}",
                          (after[-1].value or {}).get("task_id"), last=after[-1].brief())
    acked = {i.task_id for i in run.items if i.op.ok}
    last_read = {}
    for op, tid, state, _ in _reads(run):
        if tid in acked and (heal is None or op.invoke_time >= heal):
            last_read[tid] = (op, state)
    res.counts["acked_read_after_heal"] = len(last_read)
    for tid, (op, state) in last_read.items():
        if not sm.is_terminal(state):
            res.violation(f"the last read of acknowledged task after the heal shows {state}", tid, read=op.brief())
