"""One fault scenario end to end: start the platform, deploy the test app, run
the workload under a seeded nemesis schedule, heal, let it settle, dump the
shards, check, and write the run folder:

    RUN_DIR/history.jsonl  ledger.jsonl  dump.json  run.json  verdict.json  summary.txt
    RUN_DIR/logs/<service>.log, pg.log
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Callable

from tests.fault.checker import check_dir
from tests.fault.checker.__main__ import summary

from .cron import Schedules, await_scheduled_terminal, await_slots_closed
from .dump import await_timer_quiescence, dump_shards, platform_shard_dsns
from .nemesis import Nemesis, NemesisRunner, describe, make_schedule
from .platform import FaultPlatform
from .recorder import Recorder
from .workload import Workload, WorkloadConfig

APP_DIR = pathlib.Path(__file__).resolve().parents[1] / "app"
APP = "default"

# Small timeouts so faults resolve in seconds, not minutes.
FAST_OVERRIDES = {
    "history": {"lease_duration_s": 3, "cancel_grace_s": 2},
    # The breaker (5 sandbox crashes of a task type in 60 s pause that type) trips in every
    # scenario that kills sandboxes; a short cooldown lets the paused tasks resume within the run.
    "dispatcher": {"lease_duration_s": 3, "rpc_timeout_s": 3, "poll_max_wait_s": 2, "breaker_cooldown_s": 2},
    "hostagent": {"heartbeat_interval_s": 1, "rpc_timeout_s": 3, "poll_max_wait_s": 2, "deployment_cache_s": 1,
                  "completion_retry_s": 15, "capacity": 6},
}


@dataclasses.dataclass
class Scenario:
    """What to break, for how long, and what the verdict must be."""

    name: str
    nemeses: Callable[[], list[Nemesis]]
    duration_s: float = 20.0  # the fault window
    gap_s: tuple[float, float] = (1.0, 3.0)
    hold_s: tuple[float, float] = (1.0, 4.0)
    after_heal_s: float = 3.0  # the workload keeps running this long after the final heal
    settle_timeout_s: float = 60.0
    shards: int = 2
    links: tuple[str, ...] = ()
    skew_services: tuple[str, ...] = ()
    mutation: str | None = None  # mutation runs: history with this guard removed (tests/fault/mutants)
    workload: WorkloadConfig = dataclasses.field(default_factory=WorkloadConfig)
    extra_overrides: dict = dataclasses.field(default_factory=dict)  # {service: {field: value}} on top
    must_fail: tuple[str, ...] = ()  # mutation runs: invariants that must catch the broken guard
    test: str = "tests/fault"
    # Cron: this many schedules created after the deploy (every schedule_every_s seconds, overlap
    # allow, this catch-up window), paused when the workload stops; cron_processes > 1 runs more
    # cron processes on the one cron database (cron2, ...).
    schedules: int = 0
    schedule_every_s: int = 1
    catchup_window_s: float = 3.0
    cron_processes: int = 1

    def overrides(self) -> dict:
        out = {k: dict(v) for k, v in FAST_OVERRIDES.items()}
        for svc, fields in self.extra_overrides.items():
            out.setdefault(svc, {}).update(fields)
        return out


def deploy_app(platform: FaultPlatform, app_dir: pathlib.Path = APP_DIR, app: str = APP) -> str:
    """Package and deploy the test app (what `ratchet deploy` does); returns its digest."""
    from ratchet.cli import bundle
    from ratchet.cli.commands import handler_messages

    data = bundle.package(app_dir)
    description = bundle.describe(data, None)
    with platform.client(timeout=60.0) as client:
        client.create_deployment(app, data, bundle.digest(data), description.get("module") or "app",
                                 handler_messages(description))
    return bundle.digest(data)


def workflow_meta() -> dict:
    """What the workflow invariants need of the app's code: each workflow's checkpoint calls by
    position, and which payload fields a wait's match holds (tests/fault/app/app.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fault_app", APP_DIR / "app.py")
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    return {"workflow_layouts": app.LAYOUTS, "workflow_event_match": app.EVENT_MATCH}


def run_scenario(sc: Scenario, seed: int, root: str | os.PathLike) -> dict:
    """Run one scenario; returns the checker's verdict plus a `harness` section."""
    run_dir = pathlib.Path(root) / f"{sc.name}-{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(run_dir, 0o777)
    ledger = run_dir / "ledger.jsonl"
    ledger.touch()
    os.chmod(ledger, 0o666)
    rec = Recorder(run_dir / "history.jsonl")
    # The platform's state lives under a short path (the host agent's Unix socket paths must stay
    # short); its logs are copied into the run folder at the end.
    state = pathlib.Path(tempfile.mkdtemp(prefix="rf-"))
    os.chmod(state, 0o755)
    platform = FaultPlatform(state / "p", shards=sc.shards, overrides=sc.overrides(), links=sc.links,
                             skew_services=sc.skew_services, cron_processes=sc.cron_processes, mutation=sc.mutation,
                             log_level="INFO")
    env = _Env(platform, rec)
    harness: dict = {"errors": [], "skipped_nemeses": {}}
    extra = {"recorder_wall0": rec.wall0, **workflow_meta()}
    schedules = None
    started = time.monotonic()
    try:
        platform.start()
        deploy_app(platform)
        if sc.schedules:
            extra["cron"] = _cron_meta(platform, sc)
            schedules = Schedules(lambda: platform.client(timeout=10.0), rec, str(ledger), sc.schedules,
                                  sc.schedule_every_s, sc.catchup_window_s)
            schedules.create()
        nemeses, harness["skipped_nemeses"] = describe(sc.nemeses(), env)
        for name, why in harness["skipped_nemeses"].items():
            rec.nemesis("skipped", {"nemesis": name, "why": why})
        schedule = make_schedule(seed, [n.name for n in nemeses], sc.duration_s, sc.gap_s, sc.hold_s)
        _write_meta(run_dir, sc, seed, schedule, harness, extra)
        workload = Workload(lambda timeout, stream=True: platform.client(timeout=timeout, max_retries=0,
                                                                         stream=stream), rec, seed,
                            str(ledger), sc.workload).start()
        runner = NemesisRunner(env, nemeses, schedule, seed).start()
        _wait_schedule(runner, sc)
        runner.stop()
        harness["errors"] += runner.errors
        harness["faults_injected"] = runner.injected
        time.sleep(sc.after_heal_s)  # the workload runs on against the healed platform
        workload.stop()
        workload.finish_clients()
        if schedules is not None:
            schedules.pause()
            harness["cron_slots_open"] = await_slots_closed(platform.cluster.dsn("ratchet_cron"), 30.0)
        harness["not_settled"] = workload.settle(sc.settle_timeout_s)
        if schedules is not None:
            harness["scheduled_not_terminal"] = await_scheduled_terminal(
                list(platform_shard_dsns(platform).values()), sc.settle_timeout_s)
        harness["errors"] += workload.errors
        workload.close()
        harness["timers_of_finished_tasks"] = await_timer_quiescence(platform_shard_dsns(platform), 10.0)
        dump_shards(platform_shard_dsns(platform), run_dir / "dump.json",
                    cron_dsn=platform.cluster.dsn("ratchet_cron") if schedules is not None else None)
    except Exception as e:
        harness["errors"].append(f"{type(e).__name__}: {e}")
        raise
    finally:
        rec.close()
        harness["seconds"] = round(time.monotonic() - started, 1)
        try:
            platform.stop()
        except Exception as e:  # noqa: BLE001 - a harness error in the verdict; the logs are still kept
            harness["errors"].append(f"platform stop: {e}")
        _keep_logs(state / "p", run_dir)
        _write_meta(run_dir, sc, seed, locals().get("schedule", []), harness, extra)
    verdict = check_dir(run_dir)
    verdict["harness"] = harness
    (run_dir / "verdict.json").write_text(json.dumps(verdict, indent=1, default=str))
    (run_dir / "summary.txt").write_text(summary(verdict) + "\n")
    return verdict


def _keep_logs(state: pathlib.Path, run_dir: pathlib.Path) -> None:
    """Copy the services' and Postgres' logs into the run folder, then drop the platform's state."""
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    for path in list((state / "logs").glob("*.log")) + list(state.glob("*.log")):
        shutil.copy(path, logs / path.name)
    shutil.rmtree(state.parent, ignore_errors=True)


class _Env:
    def __init__(self, platform, recorder):
        self.platform, self.recorder = platform, recorder


def _wait_schedule(runner: NemesisRunner, sc: Scenario) -> None:
    runner.wait(sc.duration_s + sc.hold_s[1] + 90)


def _cron_meta(platform: FaultPlatform, sc: Scenario) -> dict:
    """What the cron checker needs to know of the cron processes: their count and firing settings."""
    from ratchet.services.cron.config import load

    config = load(platform.config_path("cron"))
    return {"schedules": sc.schedules, "every_s": sc.schedule_every_s, "catchup_window_s": sc.catchup_window_s,
            "processes": sc.cron_processes, "misfire_grace_s": config.misfire_grace_s,
            "tick_interval_s": config.tick_interval_s, "send_lease_s": config.send_lease_s}


def _write_meta(run_dir: pathlib.Path, sc: Scenario, seed: int, schedule, harness: dict, extra: dict) -> None:
    meta = {"scenario": sc.name, "seed": seed, "test": sc.test, "run_dir": str(run_dir),
            "duration_s": sc.duration_s, "mutation": sc.mutation, "links": list(sc.links),
            "skew_services": list(sc.skew_services),
            "schedule": [dataclasses.asdict(s) for s in schedule], "harness": harness, **extra}
    (run_dir / "run.json").write_text(json.dumps(meta, indent=1, default=str))
