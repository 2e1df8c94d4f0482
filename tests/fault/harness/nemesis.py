"""Nemeses and the seeded scheduler that runs them.

A nemesis injects one fault and heals it. The scheduler turns a seed into a
fixed schedule (when, which nemesis, how long it is held), runs it in a thread
beside the workload, logs every action into the history, and always heals
everything at the end (a SIGSTOPped process is SIGCONTed even when the test
fails). Targets are chosen at run time from the live processes with an RNG
derived from (seed, step), so a rerun with the same seed makes the same
choices when it sees the same processes.

The environment a nemesis acts on (``env``) is duck-typed: ``env.platform``
(FaultPlatform: service pids, sandboxes, the Postgres cluster, proxy links,
clock skew) and ``env.recorder``.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import threading
import time

SERVICES = ("history", "gateway", "dispatcher", "hostagent")


def _signal(pid: int | None, sig: int) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def pid_alive(pid: int | None) -> bool:
    """True if the process runs; a zombie (exited, not yet reaped) counts as dead."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def restart_postgres(cluster, timeout: float = 60.0) -> None:
    """Start a crashed cluster. On this machine PID 1 does not reap orphans, so a
    killed postmaster stays a zombie that still answers kill(pid, 0): Postgres
    then refuses its stale postmaster.pid (and socket lock). They are removed only once the
    postmaster is really dead and none of its backends is left."""
    pid = cluster.postmaster_pid()
    if pid and not pid_alive(pid):
        deadline = time.monotonic() + 30
        while cluster._children_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        for stale in ("postmaster.pid", f".s.PGSQL.{cluster.port}.lock", f".s.PGSQL.{cluster.port}"):
            (cluster.data_dir / stale).unlink(missing_ok=True)
    if not pid_alive(cluster.postmaster_pid()):
        cluster.start(timeout=timeout)


class Nemesis:
    """One kind of fault. `inject` returns what it did (logged); `heal` undoes it."""

    name = "nemesis"

    def unavailable(self, env) -> str | None:
        """Why this nemesis cannot run here, or None."""
        return None

    def inject(self, env, rng: random.Random) -> dict:
        raise NotImplementedError

    def heal(self, env, injected: dict) -> dict:
        return {}


def _missing_service(env, service: str) -> str | None:
    names = getattr(env.platform, "service_names", None)
    if names is not None and service not in names():
        return f"no {service} process in this platform (it runs {', '.join(names())})"
    return None


class KillService(Nemesis):
    """SIGKILL one service process (any of the platform's, e.g. ``cron`` or a second
    ``cron2``); the platform's supervisor restarts it."""

    def __init__(self, service: str):
        self.service, self.name = service, f"kill-{service}"

    def unavailable(self, env):
        return _missing_service(env, self.service)

    def inject(self, env, rng):
        pid = env.platform.service_pid(self.service)
        return {"target": self.service, "pid": pid, "signalled": _signal(pid, signal.SIGKILL)}

    def heal(self, env, injected):
        env.platform.ensure_serving(self.service)
        return {"target": self.service, "pid": env.platform.service_pid(self.service)}


class PauseService(Nemesis):
    """SIGSTOP one service process (a GC pause, a hung VM), SIGCONT on heal."""

    def __init__(self, service: str):
        self.service, self.name = service, f"pause-{service}"

    def unavailable(self, env):
        return _missing_service(env, self.service)

    def inject(self, env, rng):
        pid = env.platform.service_pid(self.service)
        return {"target": self.service, "pid": pid, "signalled": _signal(pid, signal.SIGSTOP)}

    def heal(self, env, injected):
        return {"target": self.service, "pid": injected["pid"], "resumed": _signal(injected["pid"], signal.SIGCONT)}


class _SandboxNemesis(Nemesis):
    def _pick(self, env, rng) -> dict | None:
        boxes = sorted(env.platform.sandboxes(), key=lambda b: b["pid"])
        busy = [b for b in boxes if b.get("task_id")]
        pool = busy or boxes
        return rng.choice(pool) if pool else None


class KillSandbox(_SandboxNemesis):
    """SIGKILL a sandbox (one running a task when there is one)."""

    name = "kill-sandbox"

    def inject(self, env, rng):
        box = self._pick(env, rng)
        if box is None:
            return {"target": "sandbox", "pid": None, "signalled": False}
        return {"target": "sandbox", **box, "signalled": _signal(box["pid"], signal.SIGKILL)}


class PauseSandbox(_SandboxNemesis):
    """SIGSTOP a sandbox while it runs a task; SIGCONT on heal."""

    name = "pause-sandbox"

    def inject(self, env, rng):
        box = self._pick(env, rng)
        if box is None:
            return {"target": "sandbox", "pid": None, "signalled": False}
        return {"target": "sandbox", **box, "signalled": _signal(box["pid"], signal.SIGSTOP)}

    def heal(self, env, injected):
        return {"pid": injected.get("pid"), "resumed": _signal(injected.get("pid"), signal.SIGCONT)}


class CrashPostgres(Nemesis):
    """SIGKILL the postmaster (an immediate crash: crash recovery on restart)."""

    name = "crash-postgres"

    def inject(self, env, rng):
        cluster = env.platform.cluster
        pid = cluster.postmaster_pid()
        cluster.kill()
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        return {"target": "postgres", "pid": pid, "dead": not pid_alive(pid)}

    def heal(self, env, injected):
        restart_postgres(env.platform.cluster)
        return {"target": "postgres", "pid": env.platform.cluster.postmaster_pid()}


class TerminateBackends(Nemesis):
    """pg_terminate_backend on a few random backends serving the platform's databases."""

    name = "terminate-backends"

    def __init__(self, count: int = 3):
        self.count = count

    def inject(self, env, rng):
        pids = env.platform.backend_pids()
        chosen = rng.sample(pids, min(self.count, len(pids)))
        killed = env.platform.terminate_backends(chosen)
        return {"target": "postgres-backends", "pids": chosen, "terminated": killed}


class ProxyFault(Nemesis):
    """A network fault on one proxied link: delay, drop-up, drop-down, blackhole, reset or refuse."""

    MODES = ("delay", "delay-up", "delay-down", "drop-up", "drop-down", "blackhole", "reset", "refuse")

    def __init__(self, link: str, mode: str, delay_s: float = 0.5):
        if mode not in self.MODES:
            raise ValueError(f"mode is one of {self.MODES}")
        self.link, self.mode, self.delay_s = link, mode, delay_s
        self.name = f"net-{mode}-{link}"

    def unavailable(self, env):
        return None if self.link in env.platform.links else f"no proxied link {self.link!r} in this platform"

    def inject(self, env, rng):
        link = env.platform.links[self.link]
        out = {"target": self.link, "mode": self.mode}
        if self.mode.startswith("delay"):
            link.delay(self.delay_s, self.mode.split("-")[1] if "-" in self.mode else "both")
            out["delay_s"] = self.delay_s
        elif self.mode.startswith("drop-"):
            link.drop(self.mode.split("-")[1])
        elif self.mode == "blackhole":
            link.blackhole()
        elif self.mode == "reset":
            out["reset"] = link.reset()
        elif self.mode == "refuse":
            link.refuse(True)
            out["reset"] = link.reset()
        return out

    def heal(self, env, injected):
        env.platform.links[self.link].heal()
        return {"target": self.link}


class RivalHistory(Nemesis):
    """A second history process on the same shard databases for the hold time (a standby
    during a takeover: two processes that both believe they own the shards). Its timer loops
    race the first one's for every due timer and lease check; only the claim's locks (FOR
    UPDATE ... SKIP LOCKED, and firing only what its own delete took) keep one timer from
    firing twice. Nobody calls it: it only fires timers."""

    name = "rival-history"

    def unavailable(self, env):
        return None if hasattr(env.platform, "start_rival_history") else "this platform cannot start a second history"

    def inject(self, env, rng):
        return {"target": "history", "rival_pid": env.platform.start_rival_history()}

    def heal(self, env, injected):
        env.platform.stop_rival_history()
        return {"target": "history", "rival_pid": injected["rival_pid"]}


class ClockSkew(Nemesis):
    """Skew the wall clock of one service process (libfaketime); Postgres keeps the true clock."""

    def __init__(self, service: str, offset_s: float):
        self.service, self.offset_s = service, offset_s
        self.name = f"skew-{service}{offset_s:+g}s"

    def unavailable(self, env):
        return env.platform.skew_unavailable(self.service)

    def inject(self, env, rng):
        env.platform.skew(self.service, self.offset_s)
        return {"target": self.service, "offset_s": self.offset_s}

    def heal(self, env, injected):
        env.platform.skew(self.service, 0)
        return {"target": self.service, "offset_s": 0}


@dataclasses.dataclass(frozen=True)
class Step:
    at_s: float
    nemesis: str
    hold_s: float


def make_schedule(seed: int, names: list[str], duration_s: float, gap_s=(1.0, 3.0),
                  hold_s=(1.0, 4.0)) -> list[Step]:
    """The fault schedule for a seed: deterministic, one fault at a time."""
    rng = random.Random(seed)
    steps, t = [], rng.uniform(*gap_s)
    while names and t < duration_s:
        hold = round(rng.uniform(*hold_s), 3)
        steps.append(Step(round(t, 3), rng.choice(names), hold))
        t += hold + rng.uniform(*gap_s)
    return steps


class NemesisRunner:
    """Runs a schedule in a background thread; `stop()` cuts it short, and every
    exit path heals what is active and logs the final `heal`."""

    def __init__(self, env, nemeses: list[Nemesis], schedule: list[Step], seed: int):
        self.env, self.seed, self.schedule = env, seed, schedule
        self.nemeses = {n.name: n for n in nemeses}
        self._stop = threading.Event()
        self._active: list[tuple[Nemesis, dict]] = []
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.errors: list[str] = []
        self.injected = 0

    def start(self) -> NemesisRunner:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        rec = self.env.recorder
        try:
            for i, step in enumerate(self.schedule):
                if self._stop.wait(max(0.0, self._t0 + step.at_s - time.monotonic())):
                    break
                self._one(rec, i, step)
        except Exception as e:  # noqa: BLE001 - a nemesis that breaks is a harness error, reported by the test
            self.errors.append(f"{type(e).__name__}: {e}")
            rec.nemesis("error", {"error": str(e)})
        finally:
            self.heal_all()

    def _one(self, rec, i: int, step: Step) -> None:
        nem = self.nemeses[step.nemesis]
        rec.nemesis(nem.name, {"step": i, "hold_s": step.hold_s}, type_="invoke")
        info = nem.inject(self.env, random.Random(f"{self.seed}:{i}"))
        self.injected += 1
        self._active.append((nem, info))
        rec.nemesis(nem.name, {"step": i, "injected": _public(info)})
        self._stop.wait(step.hold_s)
        self._active.remove((nem, info))
        healed = nem.heal(self.env, info)
        rec.nemesis(f"{nem.name}:healed", {"step": i, **healed})

    def heal_all(self) -> None:
        """Undo every active fault, heal every link and skew, then log the final heal."""
        while self._active:
            nem, info = self._active.pop()
            try:
                nem.heal(self.env, info)
            except Exception as e:  # noqa: BLE001 - a harness error, reported; the other faults still heal
                self.errors.append(f"heal {nem.name}: {e}")
        try:
            self.env.platform.heal_everything()
        except Exception as e:  # noqa: BLE001 - a harness error, reported by the test
            self.errors.append(f"heal_everything: {e}")
        self.env.recorder.nemesis("heal", "all")

    def wait(self, timeout: float) -> bool:
        """Wait for the schedule to run out; True when it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self, timeout: float = 120.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.errors.append("the nemesis thread did not stop in time")


def _public(info: dict) -> dict:
    return {k: v for k, v in info.items() if not k.startswith("_")}


def describe(nemeses: list[Nemesis], env) -> tuple[list[Nemesis], dict[str, str]]:
    """(the nemeses that can run here, {name: why not} for the others)."""
    ok, skipped = [], {}
    for n in nemeses:
        why = n.unavailable(env)
        if why:
            skipped[n.name] = why
        else:
            ok.append(n)
    return ok, skipped
