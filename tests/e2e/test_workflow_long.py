"""A 10,000-step workflow starts, suspends, resumes through its whole log and shows it paged
(issue 24). Long (minutes on two cores): `make chaos` runs it, `make test` runs the 1,500-step
one in test_workflows.py."""

from __future__ import annotations

import time

import pytest

from .test_workflows import _finished

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]


def test_a_10000_step_workflow_starts_resumes_and_pages_its_log(client):
    n = 10_000
    started = time.monotonic()
    wid = client.start_workflow("many_steps", {"n": n, "sleep_s": 1})
    run = _finished(client, wid, timeout=840)
    took = time.monotonic() - started
    assert run.state == "SUCCEEDED" and run.result == n * (n - 1) // 2, run
    assert run.step_count == n + 1 and run.activations == 2  # once through, once resumed through all
    steps = list(client.iter_workflow_steps(wid))
    assert [s.position for s in steps] == list(range(n + 1))
    assert [s.name for s in steps[:3]] == ["s0", "s1", "s2"] and steps[-1].name == "rest"
    assert all(s.state == "COMPLETED" and s.attempt == 1 for s in steps)
    print(f"10,000 steps, a sleep and a resume through them: {took:.1f} s")
