"""The short fault tier, part of `make test`: a few nemeses against the mixed
workload, each ending with every invariant holding (`cron_kill` adds two
per-second schedules and SIGKILLs the cron process; `sandbox_kill` and
`hostagent_kill` run workflow runs beside the tasks, so the workflow invariants
see runs whose sandboxes and host agent die under them, at no extra time). The
long matrix is in test_chaos.py (`make chaos`)."""

from __future__ import annotations

import pytest

from tests.fault.conftest import fault_seed
from tests.fault.harness.assertions import assert_cron_checked, assert_valid, assert_workflows_checked
from tests.fault.harness.nemesis import KillSandbox, KillService, PauseService, TerminateBackends
from tests.fault.harness.scenario import Scenario, run_scenario
from tests.fault.harness.workload import WorkloadConfig

# About one new request in three starts a workflow run (tests/fault/app/app.py's flow), and some
# of the runs are cancelled (the workload's default share).
WORKFLOWS = WorkloadConfig(workflow_every=3)

SHORT = {
    "sandbox_kill": Scenario("sandbox_kill", lambda: [KillSandbox()], duration_s=10, gap_s=(0.3, 1.0),
                             hold_s=(0.2, 0.5), workload=WORKFLOWS, test="tests/fault/test_short.py"),
    "hostagent_kill": Scenario("hostagent_kill", lambda: [KillService("hostagent")], duration_s=10,
                               gap_s=(2.0, 3.0), hold_s=(1.0, 2.0), workload=WORKFLOWS,
                               test="tests/fault/test_short.py"),
    "dispatcher_pause": Scenario("dispatcher_pause", lambda: [PauseService("dispatcher")], duration_s=10,
                                 gap_s=(1.0, 2.0), hold_s=(1.5, 4.0), test="tests/fault/test_short.py"),
    "pg_terminate": Scenario("pg_terminate", lambda: [TerminateBackends(4)], duration_s=10, gap_s=(0.5, 1.5),
                             hold_s=(0.2, 0.5), test="tests/fault/test_short.py"),
    "cron_kill": Scenario("cron_kill", lambda: [KillService("cron")], duration_s=10, gap_s=(1.5, 2.5),
                          hold_s=(1.0, 2.0), schedules=2, test="tests/fault/test_short.py"),
}


@pytest.mark.timeout(150, method="thread")
@pytest.mark.parametrize("name", list(SHORT))
def test_short_scenario(name, fault_root):
    verdict = run_scenario(SHORT[name], fault_seed(1), fault_root)
    assert_valid(verdict)
    if SHORT[name].schedules:
        assert_cron_checked(verdict)
    if SHORT[name].workload.workflow_every:
        assert_workflows_checked(verdict)
