"""`ratchet dev up|down|status|env`: the local platform from the command line.

One process, the supervisor, owns the platform: it starts Postgres and the
services (its children), restarts services that die, and stops everything on
SIGTERM or Ctrl-C. `dev up` runs it in the foreground; `dev up --detach`
runs it as a background process (`python -m ratchet.cli.daemon`) and returns
once it reports ready. It records itself in run/supervisor.json, which
`dev down` uses to stop it, by pid and start time, never by name.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

from ratchet.cli import procs
from ratchet.cli.errors import CLIError
from ratchet.cli.platform import SERVICES, LocalCluster, LocalPlatform, PlatformError

DETACH_TIMEOUT_S = 180.0


def supervisor_file(state_dir: pathlib.Path) -> pathlib.Path:
    return state_dir / "run" / "supervisor.json"


def _record(state_dir: pathlib.Path, state: str, **extra: object) -> None:
    pid = os.getpid()
    procs.write_json(supervisor_file(state_dir), {"pid": pid, "start_time": procs.start_time(pid),
                                                  "state": state, **extra})


def running_supervisor(state_dir: pathlib.Path) -> dict | None:
    """The supervisor record when its process is alive, else None."""
    rec = procs.read_json(supervisor_file(state_dir))
    if rec and procs.is_ours(rec.get("pid"), rec.get("start_time")):
        return rec
    return None


def load_options(path: str | None) -> dict:
    """LocalPlatform keyword options from a JSON file (tests: small timeouts, fakes)."""
    if not path:
        return {}
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CLIError(f"cannot read platform options {path}: {e}") from None
    allowed = {"overrides", "service_modules", "pg_settings", "env", "ready_timeout", "log_level"}
    if not isinstance(data, dict) or set(data) - allowed:
        raise CLIError(f"platform options {path} may only have the keys {sorted(allowed)}")
    return data


def serve(state_dir: pathlib.Path, shards: int, options: dict, announce: bool) -> int:
    """Run the platform in this process until SIGTERM/SIGINT. Returns an exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    stop = threading.Event()

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt  # abort start(), which then stops what it started

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, interrupt)
    _record(state_dir, "starting")
    platform = LocalPlatform(state_dir, shards=shards, **options)
    try:
        platform.start()
    except KeyboardInterrupt:
        _record(state_dir, "stopped", error="interrupted while starting")
        return 130
    except (PlatformError, OSError, ValueError) as e:
        _record(state_dir, "failed", error=str(e))
        print(f"error: {e}", file=sys.stderr)
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    _record(state_dir, "ready")
    if announce:
        print(summary(platform.endpoints))
        print("Serving. Press Ctrl-C to stop.", flush=True)
    try:
        stop.wait()
    finally:
        _record(state_dir, "stopping")
        platform.stop()
        _record(state_dir, "stopped")
        if announce:
            print("Stopped.", flush=True)
    return 0


def up(state_dir: pathlib.Path, shards: int, detach: bool, options_file: str | None) -> int:
    options = load_options(options_file)
    current = running_supervisor(state_dir)
    if current and current.get("state") == "ready":
        print(summary(_endpoints(state_dir)))
        print(f"(already running, supervisor pid {current['pid']})")
        return 0
    if current:
        raise CLIError(f"a platform is already {current.get('state')} in {state_dir} "
                       f"(pid {current['pid']}); wait, or run `ratchet dev down`")
    state_dir.mkdir(parents=True, exist_ok=True)
    if not detach:
        return serve(state_dir, shards, options, announce=True)
    return _detach(state_dir, shards, options_file)


def _detach(state_dir: pathlib.Path, shards: int, options_file: str | None) -> int:
    supervisor_file(state_dir).unlink(missing_ok=True)
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    log_path = state_dir / "logs" / "supervisor.log"
    cmd = [sys.executable, "-m", "ratchet.cli.daemon", "--state-dir", str(state_dir), "--shards", str(shards)]
    if options_file:
        cmd += ["--options", str(pathlib.Path(options_file).resolve())]
    with open(log_path, "ab") as logf:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                 start_new_session=True, cwd=state_dir)
    deadline = time.monotonic() + DETACH_TIMEOUT_S
    while time.monotonic() < deadline:
        rec = procs.read_json(supervisor_file(state_dir)) or {}
        if rec.get("pid") == child.pid and rec.get("state") == "ready":
            print(summary(_endpoints(state_dir)))
            return 0
        if child.poll() is not None:
            if rec.get("pid") == child.pid and rec.get("error"):
                raise CLIError(f"the platform did not start: {rec['error']}")
            raise CLIError(f"the platform did not start; last lines of {log_path}:\n{procs.tail(log_path)}")
        time.sleep(0.2)
    child.terminate()
    raise CLIError(f"the platform was not ready within {DETACH_TIMEOUT_S:g}s; stopped it.\n"
                   f"last lines of {log_path}:\n{procs.tail(log_path)}")


def down(state_dir: pathlib.Path, timeout: float = 60.0) -> int:
    """Stop the supervisor, then anything it recorded that is still alive, then Postgres."""
    rec = running_supervisor(state_dir)
    if rec:
        procs.terminate(rec["pid"], rec.get("start_time"), grace=timeout)
    endpoints = procs.read_json(state_dir / "endpoints.json") or {}
    leftovers = 0
    for _name, svc in (endpoints.get("services") or {}).items():
        if procs.is_ours(svc.get("pid"), svc.get("start_time")):
            leftovers += 1
            procs.terminate(svc["pid"], svc.get("start_time"))
    pg_dir = state_dir / "pg"
    if (pg_dir / "PG_VERSION").exists():
        cluster = LocalCluster(pg_dir)
        if cluster.running():
            cluster.stop()
    if rec is None and not leftovers:
        print(f"nothing was running in {state_dir}")
    else:
        print(f"stopped the platform in {state_dir}")
    return 0


def status(state_dir: pathlib.Path, as_json: bool = False) -> int:
    """Print each part's health; exit 0 only when every service is SERVING."""
    endpoints = _endpoints(state_dir)
    sup = running_supervisor(state_dir)
    rows = {"supervisor": {"pid": sup["pid"] if sup else None,
                           "status": (sup or {}).get("state", "down").upper() if sup else "DOWN"}}
    pg = endpoints.get("postgres") or {}
    pg_up = (state_dir / "pg" / "PG_VERSION").exists() and LocalCluster(state_dir / "pg").running()
    rows["postgres"] = {"pid": pg.get("pid") if pg_up else None, "port": pg.get("port"),
                        "status": "RUNNING" if pg_up else "DOWN"}
    for name in SERVICES:
        svc = (endpoints.get("services") or {}).get(name) or {}
        alive = procs.is_ours(svc.get("pid"), svc.get("start_time"))
        rows[name] = {"pid": svc.get("pid") if alive else None, "grpc": svc.get("grpc"),
                      "status": procs.health(svc["grpc"]) if alive and svc.get("grpc") else "DOWN"}
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        for name, row in rows.items():
            where = row.get("grpc") or (f"127.0.0.1:{row['port']}" if row.get("port") else "")
            print(f"{name:<11} {row['status']:<12} pid {row['pid'] or '-'!s:<8} {where}")
    ok = all(rows[name]["status"] == "SERVING" for name in SERVICES)
    return 0 if ok else 1


def env(state_dir: pathlib.Path) -> int:
    """Shell exports for the platform: eval "$(ratchet dev env)"."""
    e = _endpoints(state_dir)
    for key, value in (("RATCHET_ENDPOINT", e["grpc"]), ("RATCHET_API_KEY", e["api_key"]),
                       ("RATCHET_ADMIN_KEY", e["admin_key"]), ("RATCHET_REST", e["rest"])):
        print(f"export {key}='{value}'")
    return 0


def _endpoints(state_dir: pathlib.Path) -> dict:
    data = procs.read_json(state_dir / "endpoints.json")
    if data is None:
        raise CLIError(f"no platform in {state_dir} (no endpoints.json): start one with `ratchet dev up`")
    return data


def summary(e: dict) -> str:
    """What a person needs after `dev up`: where things are and the key."""
    return "\n".join([
        "Ratchet is up.",
        f"  REST      {e['rest']}",
        f"  OpenAPI   {e['openapi']}",
        f"  gRPC      {e['grpc']}",
        f"  tenant    {e['tenant']} (app {e['app']})",
        f"  API key   {e['api_key']}",
        f"  logs      {pathlib.Path(e['postgres']['data_dir']).parent / 'logs'}",
    ])
