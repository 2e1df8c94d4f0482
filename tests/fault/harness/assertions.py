"""How a fault test judges a run."""

from __future__ import annotations

import json

from tests.fault.checker.__main__ import summary


def explain(verdict: dict) -> str:
    harness = verdict.get("harness", {})
    return (f"{summary(verdict)}\n  harness: {json.dumps(harness, default=str)[:1500]}\n"
            f"  run folder: {verdict.get('recheck', '').split()[-1]}")


def assert_valid(verdict: dict, min_acked: int = 10) -> None:
    """Every invariant holds, the harness itself had no error, and enough work was done to mean something."""
    assert not verdict["harness"]["errors"], explain(verdict)
    assert verdict["stats"]["acked"] >= min_acked, "too little work to judge:\n" + explain(verdict)
    assert verdict["valid"], explain(verdict)


def assert_caught(verdict: dict, invariants: tuple[str, ...]) -> None:
    """A mutation run: the checker must report the disabled guard through these invariants."""
    assert not verdict["harness"]["errors"], explain(verdict)
    failing = [name for name, res in verdict["invariants"].items() if not res["valid"]]
    assert not verdict["valid"] and any(name in failing for name in invariants), (
        f"the checker missed the disabled guard (expected one of {invariants} to fail):\n" + explain(verdict))


def assert_cron_checked(verdict: dict) -> None:
    """A run with schedules: the cron invariants looked at real slots and tasks (no vacuous pass)."""
    inv = verdict["invariants"]
    for name in ("cron_slot_tasks", "cron_slot_times", "cron_catchup"):
        assert inv[name]["checked"] > 0, f"{name} checked nothing:\n" + explain(verdict)
    assert inv["cron_slot_tasks"]["counts"]["fired"] > 0, "no slot fired:\n" + explain(verdict)


def assert_workflows_checked(verdict: dict) -> None:
    """A run with workflows: the workflow invariants looked at real runs and step executions, some of
    which succeeded after a wait (no vacuous pass)."""
    inv = verdict["invariants"]
    for name in ("wf_step_once", "wf_step_claims", "wf_step_log", "wf_waiting", "wf_events"):
        assert inv[name]["checked"] > 0, f"{name} checked nothing:\n" + explain(verdict)
    assert inv["wf_step_once"]["counts"]["executions"] > 0, "no step executed:\n" + explain(verdict)
    assert inv["wf_step_log"]["counts"]["by_state"].get("SUCCEEDED", 0) > 0, "no run succeeded:\n" + explain(verdict)
    assert inv["wf_waiting"]["counts"]["suspensions"] > 0, "no run suspended:\n" + explain(verdict)
