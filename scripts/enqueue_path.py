"""Which of the repository's files an enqueue passes through, measured: the local platform
runs with a profile hook in every service, and for each form of enqueue (an SDK call, an SDK
batch call, a REST POST, each with and without an idempotency key) the script lists the files
whose functions ran while it enqueued, less those that ran in an idle window as long.

    .venv/bin/python scripts/enqueue_path.py [--json]

Run it from the root of the tree to measure (with that tree's venv), e.g. once in a worktree
of an older commit and once here. Generated code (gen/) and installed packages are left out;
the SDK's files are traced in this process the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import sys
import tempfile
import textwrap
import time
import urllib.request
import uuid
from collections import Counter

ROOT = pathlib.Path.cwd()

# Installed in each service through PYTHONPATH: SIGUSR1 starts a window, SIGUSR2 ends it and
# writes the calls per file to $RATCHET_TRACE_DIR/<pid>.json.
SITECUSTOMIZE = textwrap.dedent('''
    import json, os, signal, sys, threading
    _dir = os.environ.get("RATCHET_TRACE_DIR")
    if _dir:
        _seen = {}
        def _hook(frame, event, arg):
            if event == "call":
                f = frame.f_code.co_filename
                _seen[f] = _seen.get(f, 0) + 1
        def _start(signum, frame):
            _seen.clear()
            sys.setprofile(_hook)
            threading.setprofile(_hook)
        def _stop(signum, frame):
            sys.setprofile(None)
            path = os.path.join(_dir, f"{os.getpid()}.json")
            with open(path + ".tmp", "w") as f:
                json.dump(_seen, f)
            os.replace(path + ".tmp", path)  # whole or absent for the reader
        signal.signal(signal.SIGUSR1, _start)
        signal.signal(signal.SIGUSR2, _stop)
''')

SERVICES = ("gateway", "history", "dispatcher", "cron", "hostagent")


def repo_file(path: str) -> str | None:
    """path relative to the repository (the installed package links back to it), or None."""
    real = pathlib.Path(path).resolve()
    try:
        rel = real.relative_to(ROOT)
    except ValueError:
        return None
    if rel.parts[0] in ("gen", ".venv", "build") or rel.suffix != ".py":
        return None
    return str(rel)


class Tracer:
    def __init__(self, platform, trace_dir: pathlib.Path):
        self.platform, self.dir = platform, trace_dir
        self._seen: Counter[str] = Counter()

    def _hook(self, frame, event, arg):
        if event == "call":
            self._seen[frame.f_code.co_filename] += 1

    def window(self, work, seconds: float) -> dict[str, Counter[str]]:
        """Calls per repo file in each service (and this process) during work, padded to seconds."""
        pids = {name: self.platform.service_pid(name) for name in SERVICES}
        for f in self.dir.glob("*.json"):
            f.unlink()
        for pid in pids.values():
            os.kill(pid, signal.SIGUSR1)
        time.sleep(0.2)
        self._seen.clear()
        sys.setprofile(self._hook)
        started = time.monotonic()
        try:
            work()
        finally:
            sys.setprofile(None)
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))
        for pid in pids.values():
            os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + 10
        out = {"sdk": counted(self._seen)}
        for name, pid in pids.items():
            path = self.dir / f"{pid}.json"
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            out[name] = counted(json.loads(path.read_text()))
        return out


def counted(calls: dict[str, int]) -> Counter[str]:
    out: Counter[str] = Counter()
    for path, n in calls.items():
        rel = repo_file(path)
        if rel:
            out[rel] += n
    return out


def deploy_noop(platform) -> None:
    """The bench's no-op app as app `default` (an enqueue needs a deployment)."""
    from ratchet.cli import bundle
    from ratchet.cli.commands import handler_messages
    data = bundle.package(ROOT / "loadtest" / "apps" / "noop")
    description = bundle.describe(data)
    with platform.client(timeout=60.0) as client:
        client.create_deployment("default", data, bundle.digest(data), description.get("module") or "app",
                                 handler_messages(description))


def forms(platform, client):
    rest = platform.endpoints["rest"]
    api_key = platform.tenant["api_key"]

    def post(body: dict) -> None:
        req = urllib.request.Request(f"{rest}/v1/tasks", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

    def later(**kw):
        return {"task_type": "noop", "payload": {"n": 1}, "delay": "1h", **kw}

    def key() -> dict:
        return {"idempotency_key": uuid.uuid4().hex}

    one = {"task_type": "noop", "payload": {"n": 1}}
    # (requests made, the work): each request on its own, so each is at least one call per file
    return {
        "SDK enqueue": (5, lambda: [client.enqueue("noop", {"n": 1}, delay="1h") for _ in range(5)]),
        "SDK enqueue, keyed": (5, lambda: [client.enqueue("noop", {"n": 1}, delay="1h", **key())
                                           for _ in range(5)]),
        "SDK enqueue_batch of 20": (3, lambda: [client.enqueue_batch([later() for _ in range(20)])
                                                for _ in range(3)]),
        "SDK enqueue_batch of 20, keyed": (3, lambda: [client.enqueue_batch([later(**key()) for _ in range(20)])
                                                       for _ in range(3)]),
        "REST POST /v1/tasks": (5, lambda: [post({**one, "delay": "3600s"}) for _ in range(5)]),
        "REST POST /v1/tasks, keyed": (5, lambda: [post({**one, "delay": "3600s", **key()}) for _ in range(5)]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the files per form as JSON")
    args = parser.parse_args()
    from ratchet.cli.platform import LocalPlatform
    with tempfile.TemporaryDirectory(prefix="ratchet-path-") as tmp:
        tmp_path = pathlib.Path(tmp)
        hook_dir, trace_dir = tmp_path / "hook", tmp_path / "trace"
        hook_dir.mkdir()
        trace_dir.mkdir()
        (hook_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
        env = {"PYTHONPATH": str(hook_dir), "RATCHET_TRACE_DIR": str(trace_dir)}
        platform = LocalPlatform(tmp_path / "state", shards=2, env=env, ready_timeout=90.0, log_level="WARNING")
        with platform:
            deploy_noop(platform)
            client = platform.client()
            tracer = Tracer(platform, trace_dir)
            results = {}
            for name, (calls, work) in forms(platform, client).items():
                work()  # warm: first-call imports and connections are not the path
                idle = [tracer.window(lambda: None, 2.0) for _ in range(3)]
                busy = tracer.window(work, 2.0)
                # On the path: called at least once per request more than in the busiest idle
                # window (the services' own loops run in both).
                results[name] = {svc: sorted(f for f, n in busy[svc].items()
                                             if n - max(w[svc][f] for w in idle) >= calls) for svc in busy}
            client.close()
    if args.json:
        print(json.dumps(results, indent=1))
        return
    every: set[str] = set()
    for name, per in results.items():
        files = sorted({f for fs in per.values() for f in fs})
        every.update(files)
        print(f"{name}: {len(files)} files")
        for svc, fs in per.items():
            if fs:
                print(f"  {svc}: {', '.join(fs)}")
    print(f"any enqueue: {len(every)} files")


if __name__ == "__main__":
    main()
