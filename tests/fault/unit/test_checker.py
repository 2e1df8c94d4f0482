"""The checker proves it can fail: a clean crafted run passes every invariant,
and each crafted violation makes the named invariant (and the verdict) fail."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ratchet.libs.shardmap import new_task_id
from tests.fault.checker import Run, check
from tests.fault.checker.__main__ import summary

from .histories import Builder, clean, final_version


def verdict_of(b: Builder) -> dict:
    history, ledger, dump, meta = b.run()
    return check(Run.from_parts(history, ledger, dump, meta))


def rows(b: Builder, table: str, task_id: str) -> list[dict]:
    return [r for r in b.tables[table] if r.get("task_id") == task_id]


def task_row(b: Builder, task_id: str) -> dict:
    return rows(b, "tasks", task_id)[0]


def assert_fails(verdict: dict, name: str, words: str = "") -> dict:
    res = verdict["invariants"][name]
    assert not verdict["valid"], "the verdict must fail"
    assert not res["valid"], f"{name} should fail:\n{summary(verdict)}"
    assert res["counterexamples"], "a failing invariant names a counterexample"
    if words:
        problems = " | ".join(c["problem"] for c in res["counterexamples"])
        assert words in problems, problems
    return res


def test_clean_run_passes_every_invariant():
    b, _ids = clean()
    verdict = verdict_of(b)
    assert verdict["valid"], summary(verdict)
    inv = verdict["invariants"]
    assert inv["acked_terminal"]["counts"]["lost"] == 0 and inv["acked_terminal"]["counts"]["stuck"] == 0
    assert inv["enqueue_outcomes"]["counts"]["ambiguous_absent"] == 1
    assert inv["enqueue_outcomes"]["counts"]["ambiguous_terminal"] == 1
    dup = inv["duplicates_explained"]["counts"]
    assert dup["duplicate_side_effects"] == 1 and dup["why"] == {"lease_expired": 1}
    assert dup["leases_never_started"] == 1
    assert verdict["seed"] == 7 and "RATCHET_FAULT_SEED=7" in verdict["rerun"]
    assert [e["f"] for e in verdict["schedule"]] == ["kill", "heal"]
    json.dumps(verdict)  # the verdict is plain JSON


def test_lost_acked_task():
    b, ids = clean()
    b.tables["tasks"] = [r for r in b.tables["tasks"] if r["task_id"] != ids["a"]]
    b.tables["task_transitions"] = [r for r in b.tables["task_transitions"] if r["task_id"] != ids["a"]]
    res = assert_fails(verdict_of(b), "acked_terminal", "lost")
    assert res["counts"]["lost"] == 1
    assert res["counterexamples"][0]["task_id"] == ids["a"]


def test_stuck_acked_task():
    b, ids = clean()
    b.tables["task_transitions"] = [r for r in b.tables["task_transitions"]
                                    if not (r["task_id"] == ids["a"] and r["to_state"] == "SUCCEEDED")]
    task_row(b, ids["a"]).update(state="LEASED", version=2)
    res = assert_fails(verdict_of(b), "acked_terminal", "stuck")
    ex = res["counterexamples"][0]
    assert ex["log"][-1]["to"] == "LEASED" and ex["ledger"], "the counterexample carries its slices"


def test_ambiguous_enqueue_present_but_not_terminal():
    b, ids = clean()
    b.tables["task_transitions"] = [r for r in b.tables["task_transitions"]
                                    if not (r["task_id"] == ids["b"] and r["version"] > 1)]
    task_row(b, ids["b"]).update(state="ENQUEUED", version=1, attempt=0, lease_epoch=0)
    b.tables["task_attempts"] = [r for r in b.tables["task_attempts"] if r["task_id"] != ids["b"]]
    b.ledger = [e for e in b.ledger if e["task_id"] != ids["b"]]
    assert_fails(verdict_of(b), "enqueue_outcomes", "ambiguous enqueue op-b is present but ENQUEUED")


def test_failed_enqueue_that_wrote_a_task():
    b, _ = clean()
    b.task("0190b7a0-0000-8000-8000-000000000001", "op-d", ["ok"])
    assert_fails(verdict_of(b), "enqueue_outcomes", "failed definitely yet wrote a task")


def test_unexpected_task():
    b, _ = clean()
    b.task("0190b7a0-0000-8000-8000-000000000002", "op-nobody", ["ok"])
    assert_fails(verdict_of(b), "enqueue_outcomes", "unexpected task")


def test_gap_in_versions():
    b, ids = clean()
    for r in rows(b, "task_transitions", ids["a"]):
        if r["version"] == 3:
            r["version"] = 4
    task_row(b, ids["a"])["version"] = 4
    assert_fails(verdict_of(b), "transition_log", "not consecutive")


def test_fork_two_transitions_with_one_version():
    b, ids = clean()
    b.tables["task_transitions"].append({"task_id": ids["a"], "version": 2, "from_state": "ENQUEUED",
                                         "to_state": "CANCELED", "lease_epoch": 0, "at": "x", "reason": "cancel"})
    assert_fails(verdict_of(b), "transition_log", "fork")


def test_transition_after_terminal():
    b, ids = clean()
    b.tables["task_transitions"].append({"task_id": ids["a"], "version": 4, "from_state": "SUCCEEDED",
                                         "to_state": "ENQUEUED", "lease_epoch": 1, "at": "x", "reason": "?"})
    task_row(b, ids["a"]).update(state="ENQUEUED", version=4)
    assert_fails(verdict_of(b), "transition_log", "after terminal")


def test_transition_the_machine_does_not_allow():
    b, ids = clean()
    b.tables["task_transitions"].append({"task_id": ids["g"], "version": 3, "from_state": "CANCELED",
                                         "to_state": "SUCCEEDED", "lease_epoch": 0, "at": "x", "reason": None})
    task_row(b, ids["g"]).update(state="SUCCEEDED", version=3)
    assert_fails(verdict_of(b), "transition_log", "is not allowed")


def test_state_going_backwards_in_the_log():
    b, ids = clean()
    r = rows(b, "task_transitions", ids["a"])[2]
    r["from_state"] = "ENQUEUED"  # the log claims LEASED never happened
    assert_fails(verdict_of(b), "transition_log", "starts from ENQUEUED but the task was LEASED")


def test_lease_epoch_decreases():
    b, ids = clean()
    for r in rows(b, "task_transitions", ids["e"]):
        if r["version"] == 5:  # the second lease reuses epoch 1
            r["lease_epoch"] = 1
    assert_fails(verdict_of(b), "lease_epochs", "not above")


def test_attempt_not_charged_at_lease():
    b, ids = clean()
    # the mutation "charge attempts at completion": a lease that expired charged nothing
    task_row(b, ids["e"])["attempt"] = 1
    b.tables["task_attempts"] = [r for r in b.tables["task_attempts"]
                                 if not (r["task_id"] == ids["e"] and r["attempt"] == 1)]
    rows(b, "task_attempts", ids["e"])[0]["attempt"] = 1
    assert_fails(verdict_of(b), "attempt_accounting", "2 leases but the task row has charged 1")


def test_more_attempts_than_allowed():
    b, _ = clean()
    tid = b.enqueue("c3", "op-x")
    b.task(tid, "op-x", ["crash", "crash", "ok"], max_attempts=2)
    assert_fails(verdict_of(b), "attempt_accounting", "over max_attempts")


def test_stale_completion_accepted():
    b, ids = clean()
    # lease 1 expired, lease 2 ran; lease 1's late completion won: the result is lease 1's
    task_row(b, ids["e"])["result"] = {"lease_epoch": 1, "attempt": 1}
    assert_fails(verdict_of(b), "single_completion", "stale completion")


def test_two_completions_of_one_lease():
    b, ids = clean()
    log = rows(b, "task_transitions", ids["a"])
    b.tables["task_transitions"].append({**log[2], "version": 4, "from_state": "LEASED", "to_state": "RETRY_WAIT"})
    assert_fails(verdict_of(b), "single_completion", "completed 2 times")


def test_execution_without_a_lease():
    b, ids = clean()
    b.ledger.append({"task_id": ids["a"], "attempt": 2, "lease_epoch": 2, "pid": 9, "time": 99, "phase": "start"})
    assert_fails(verdict_of(b), "duplicates_explained", "never granted")


def test_one_lease_executed_twice():
    b, ids = clean()
    b.ledger.append({"task_id": ids["a"], "attempt": 1, "lease_epoch": 1, "pid": 9, "time": 99, "phase": "start"})
    assert_fails(verdict_of(b), "duplicates_explained", "executed 2 times")


def test_rerun_after_success_is_unexplained():
    b, _ = clean()
    tid = b.enqueue("c3", "op-y")
    b.task(tid, "op-y", ["ok"])
    # a second lease is granted although the first one succeeded (and the log is rewritten to hide it)
    log = rows(b, "task_transitions", tid)
    log[-1].update(to_state="RETRY_WAIT", reason="?")
    b.tables["task_transitions"] += [
        {"task_id": tid, "version": 4, "from_state": "RETRY_WAIT", "to_state": "ENQUEUED", "lease_epoch": 1},
        {"task_id": tid, "version": 5, "from_state": "ENQUEUED", "to_state": "LEASED", "lease_epoch": 2},
        {"task_id": tid, "version": 6, "from_state": "LEASED", "to_state": "SUCCEEDED", "lease_epoch": 2}]
    b.tables["task_attempts"].append({"task_id": tid, "attempt": 2, "lease_epoch": 2, "outcome": "SUCCEEDED"})
    task_row(b, tid).update(version=6, attempt=2, lease_epoch=2, result={"lease_epoch": 2})
    b.ledger += [{"task_id": tid, "attempt": 2, "lease_epoch": 2, "pid": 9, "time": 99, "phase": "start"},
                 {"task_id": tid, "attempt": 2, "lease_epoch": 2, "pid": 9, "time": 99, "phase": "end",
                  "outcome": "ok"}]
    res = assert_fails(verdict_of(b), "duplicates_explained", "unexplained duplicate")
    assert "SUCCEEDED" in res["counterexamples"][0]["problem"]


def test_read_goes_backwards():
    b, ids = clean()
    b.get("c1", ids["a"], "LEASED", 2)  # after reading SUCCEEDED v3
    b.get("c1", ids["a"], "SUCCEEDED", 3)
    assert_fails(verdict_of(b), "monotonic_reads", "read LEASED v2 after SUCCEEDED v3")


def test_read_of_a_state_the_log_never_had():
    b, ids = clean()
    b.get("c1", ids["a"], "FAILED", 3)
    b.get("c1", ids["a"], "SUCCEEDED", 3)
    assert_fails(verdict_of(b), "reads_match_log", "the log has SUCCEEDED")


def test_acked_task_answered_not_found():
    b, ids = clean()
    b.get("c1", ids["a"], "", 0, outcome="fail")
    b.get("c1", ids["a"], "SUCCEEDED", 3)
    assert_fails(verdict_of(b), "reads_match_log", "NOT_FOUND")


def test_one_key_two_tasks():
    b, _ids = clean()
    other = b.enqueue("c2", "op-e2", key="k-e")
    b.task(other, "op-e2", ["ok"], key="k-e")
    res = assert_fails(verdict_of(b), "idempotency", "different task ids")
    assert any("in the store" in c["problem"] for c in res["counterexamples"])


def _plain_batch(b: Builder, ops: list[str], outcome: str = "info") -> list[str]:
    """An unkeyed batch whose task ids the client minted (workload.enqueue_plain_batch)."""
    minted = [new_task_id() for _ in ops]
    items = [{"op": o, "task_type": "work", "mode": "ok", "expect": ["SUCCEEDED"], "key": None, "minted_id": m}
             for o, m in zip(ops, minted, strict=True)]
    b.op("c2", "enqueue_batch", {"plain": True, "items": items}, outcome,
         {"task_ids": minted} if outcome == "ok" else {"error": "x", "code": "UNAVAILABLE"})
    return minted


def test_ambiguous_plain_batch_holds_at_most_its_minted_tasks():
    b, _ = clean()
    minted = _plain_batch(b, ["op-p1", "op-p2"])
    b.task(minted[0], "op-p1", ["ok"])  # one committed, one absent: both fine
    b.get("c2", minted[0], *final_version(b, minted[0]))  # c2's last operation succeeds (liveness)
    assert verdict_of(b)["valid"], summary(verdict_of(b))
    b.task(minted[0][:-4] + "ffff", "op-p1", ["ok"])  # a second task for op-p1, under another id
    res = assert_fails(verdict_of(b), "enqueue_outcomes", "task id minted by the client")
    assert any("was sent as task" in c["problem"] for c in res["counterexamples"])


def test_client_fails_after_heal():
    b, ids = clean()
    b.op("c2", "get", {"task_id": ids["e"]}, "info", {"error": "deadline exceeded"})
    assert_fails(verdict_of(b), "liveness_after_heal", "ended info")


def test_client_idle_after_heal():
    b, ids = clean()
    b.nemesis("heal", "all")
    b.get("c1", ids["a"], *final_version(b, ids["a"]))
    assert_fails(verdict_of(b), "liveness_after_heal", "c2 did nothing after the final heal")


def test_handler_outcome_not_allowed_by_its_script():
    b, _ = clean()
    tid = b.enqueue("c3", "op-z", expect=("FAILED",), mode="fail")
    b.task(tid, "op-z", ["ok"])
    assert_fails(verdict_of(b), "handler_outcomes", "allows ['FAILED']")


def test_retryable_task_failed_before_spending_its_attempts():
    b, _ = clean()
    tid = b.enqueue("c3", "op-q", expect=("FAILED",), mode="fail")
    b.task(tid, "op-q", ["raise", "exhausted"], max_attempts=5)
    assert_fails(verdict_of(b), "handler_outcomes", "after 2 of 5 attempts")


def test_timer_left_behind_by_a_finished_task():
    b, ids = clean()
    b.tables["timers"].append({"task_id": ids["a"], "kind": "lease", "fire_at": "2026-01-01T00:00:00+00:00",
                               "lease_epoch": 1})
    assert_fails(verdict_of(b), "timers", "SUCCEEDED task still has timers ['lease']")


def test_waiting_task_without_its_timer():
    b, _ids = clean()
    b.enqueue("c3", "op-w", outcome="info")
    tid = "0190b7a0-0000-8000-8000-000000000003"
    b.task(tid, "op-w", ["raise"])  # left in ENQUEUED after the retry; make it RETRY_WAIT, timer lost
    b.tables["task_transitions"] = [r for r in b.tables["task_transitions"]
                                    if not (r["task_id"] == tid and r["to_state"] == "ENQUEUED" and r["version"] > 1)]
    task_row(b, tid).update(state="RETRY_WAIT", version=3)
    res = assert_fails(verdict_of(b), "timers", "RETRY_WAIT task has no retry/schedule_to_close timer")
    assert res["counterexamples"][0]["task_id"] == tid


def test_due_timer_never_fired():
    b, _ids = clean()
    tid = "0190b7a0-0000-8000-8000-000000000004"
    b.enqueue("c3", "op-v", outcome="info")
    b.task(tid, "op-v", ["raise"])
    b.tables["task_transitions"] = [r for r in b.tables["task_transitions"]
                                    if not (r["task_id"] == tid and r["to_state"] == "ENQUEUED" and r["version"] > 1)]
    task_row(b, tid).update(state="RETRY_WAIT", version=3)
    b.tables["timers"].append({"task_id": tid, "kind": "retry", "fire_at": "2026-11-30T10:00:00+00:00"})
    history, ledger, dump, meta = b.run()
    dump["db_now"] = "2026-11-30T10:00:30+00:00"
    verdict = check(Run.from_parts(history, ledger, dump, meta))
    assert_fails(verdict, "timers", "retry timer due 30.0s ago never fired")


def test_checker_crash_is_a_failure_not_a_pass():
    b, ids = clean()
    b.ledger.append({"task_id": ids["a"], "attempt": 1, "lease_epoch": "garbage", "phase": "start"})
    verdict = verdict_of(b)
    assert not verdict["valid"]
    assert "ValueError" in verdict["invariants"]["duplicates_explained"]["error"]


def test_command_line_writes_verdict_and_exit_code(tmp_path):
    b, ids = clean()
    history, ledger, dump, meta = b.run()
    meta["run_dir"] = str(tmp_path)
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in history))
    (tmp_path / "ledger.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ledger) + '{"torn')
    (tmp_path / "dump.json").write_text(json.dumps(dump))
    (tmp_path / "run.json").write_text(json.dumps(meta))
    ok = subprocess.run([sys.executable, "-m", "tests.fault.checker", str(tmp_path)], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads((tmp_path / "verdict.json").read_text())["valid"]
    dump["shards"]["0"]["tasks"] = [r for r in dump["shards"]["0"]["tasks"] if r["task_id"] != ids["a"]]
    (tmp_path / "dump.json").write_text(json.dumps(dump))
    bad = subprocess.run([sys.executable, "-m", "tests.fault.checker", str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 1 and "FAIL acked_terminal" in bad.stdout


@pytest.mark.parametrize("spelling", ["TASK_STATE_SUCCEEDED", 4, "succeeded"])
def test_state_spellings_are_normalised(spelling):
    b, ids = clean()
    task_row(b, ids["a"])["state"] = spelling
    for r in rows(b, "task_transitions", ids["a"]):
        if r["to_state"] == "SUCCEEDED":
            r["to_state"] = spelling
    verdict = verdict_of(b)
    assert verdict["valid"], summary(verdict)
