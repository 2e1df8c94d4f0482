"""ratchet.testing.WorkflowEnv reads ahead as history does (StepResponse.ahead): a resumed
run's memoized calls are answered from the entries a DONE carried, and a change of code under
the run is still caught at the position it meets."""

from __future__ import annotations

import pytest

from ratchet import testing
from ratchet.workflow import memlog, workflow

pytestmark = pytest.mark.timeout(60)

N = 600


@pytest.fixture
def answered(monkeypatch) -> list[dict]:
    """Every request the in-memory log answered (its real answers, counted)."""
    seen: list[dict] = []
    real = memlog.StepLog.answer

    def counting(self, request, epoch, now):
        seen.append(request)
        return real(self, request, epoch, now)

    monkeypatch.setattr(memlog.StepLog, "answer", counting)
    return seen


def _long(ran: list):
    @workflow
    def long_flow(ctx, input):
        total = sum(ctx.step(f"s{i}", lambda i=i: ran.append(i) or i) for i in range(N))
        ctx.sleep("pause", seconds=10)
        return total + ctx.step("last", lambda: ran.append("last") or 1)
    return long_flow


def test_a_resumed_run_asks_the_log_once_per_page_and_gets_the_same_values(answered):
    ran: list = []
    env = testing.WorkflowEnv()
    run = env.start(_long(ran), {})
    env.run_until_blocked()
    assert run.state == "WAITING" and len(answered) == 2 * N + 1
    answered.clear()
    env.advance("10s")
    assert run.state == "SUCCEEDED" and run.result == N * (N - 1) // 2 + 1
    assert ran == [*range(N), "last"]  # nothing memoized ran again
    # 0 (DONE + 500 ahead), 501 (DONE + 98), the sleep (open when read, so asked), the last step.
    assert [(r["op"], r["position"]) for r in answered] == [("begin", 0), ("begin", 501), ("begin", N),
                                                            ("begin", N + 1), ("commit", N + 1)]


def test_code_changed_under_the_run_fails_it_at_the_position_read_ahead(answered):
    ran: list = []
    env = testing.WorkflowEnv()
    run = env.start(_long(ran), {})
    env.run_until_blocked()

    @workflow
    def long_flow(ctx, input):  # the same name; step 3 renamed
        for i in range(N):
            ctx.step("renamed" if i == 3 else f"s{i}", lambda: ran.append("again"))

    env.deploy(long_flow)
    answered.clear()
    env.advance("10s")
    assert run.state == "FAILED" and run.error["error_class"] == "WorkflowVersionError"
    assert "log position 3" in run.error["message"] and "'s3'" in run.error["message"]
    assert [r["position"] for r in answered] == [0] and "again" not in ran
