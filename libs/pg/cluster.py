"""A Postgres cluster the project makes and starts itself (initdb on a free
port under a folder it owns). Used by `ratchet dev up`, the tests, the fault
harness and the benchmarks. Postgres refuses to run as root, so when we are
root the cluster runs as an unprivileged user (postgres, else nobody).
"""

from __future__ import annotations

import glob
import grp
import hashlib
import os
import pathlib
import pwd
import random
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Collection
from typing import Any

DEFAULT_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "300",
    "shared_buffers": "256MB",
    "synchronous_commit": "on",
    "fsync": "on",
    "wal_level": "replica",
    "max_wal_size": "2GB",
    "checkpoint_timeout": "15min",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] %d '",
    "autovacuum_naptime": "10s",
}


# Listening ports are picked below the kernel's ephemeral range: a port the kernel hands
# out for port 0 is one every outgoing connection may take as its local port too, and a
# service told to listen on it a moment later then failed "address already in use" (seen in
# `make test`: the gateway's REST port).
_LISTEN_PORTS = (20000, 32767)
_rng = random.Random()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(exclude: Collection[int] = ()) -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the ephemeral range when
    the kernel leaves room below it (else any free port), and not in `exclude`: ports
    already handed out for processes that have not bound them yet (two draws of the same
    free port made a service of one platform fail to bind)."""
    lo, hi = _LISTEN_PORTS[0], min(_LISTEN_PORTS[1], _ephemeral_low() - 1)
    for _ in range(100 if hi > lo else 0):
        port = _rng.randint(lo, hi)
        if port in exclude:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in exclude:
            return port
    raise OSError("no free TCP port on 127.0.0.1 outside the ones already handed out")


def pg_bindir() -> pathlib.Path:
    """The folder holding initdb and pg_ctl (Debian puts them off PATH)."""
    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(cand, "initdb")):
            return pathlib.Path(cand)
    found = shutil.which("initdb")
    if found:
        return pathlib.Path(found).parent
    raise RuntimeError("PostgreSQL binaries not found: install the Debian package postgresql-15")


# Where a root-run cluster's data goes when its own folder is closed to the
# server's user (see LocalCluster._relocate_if_unreachable).
RELOCATED_ROOT = "/var/tmp/ratchet-pg"


def _reachable(folder: pathlib.Path, user: pwd.struct_passwd) -> bool:
    """Whether user can pass through every folder from / down to folder."""
    groups = {user.pw_gid, *(g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem)}
    for part in (folder, *folder.parents):
        try:
            st = part.stat()
        except FileNotFoundError:
            continue
        if st.st_uid == user.pw_uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def _run_as() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and no unprivileged user (postgres, nobody) to run Postgres as")


class LocalCluster:
    """One Postgres cluster in data_dir, listening on 127.0.0.1:port."""

    def __init__(self, data_dir: str | os.PathLike, port: int | None = None, settings: dict | None = None):
        self.data_dir = pathlib.Path(data_dir).resolve()
        self.port = port or free_port()
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self.user = "ratchet"
        self.bindir = pg_bindir()
        self._as = _run_as()
        self.log_file = self._log_path()

    def _log_path(self) -> pathlib.Path:
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    def _relocate_if_unreachable(self) -> None:
        """Keep the data where the unprivileged server can reach it.

        As root, the server runs as another user, who cannot pass through a
        0700 folder of root's (a container's /root, a mktemp -d folder). The
        data then lives in a folder of that user's under /var/tmp, and
        data_dir becomes a link to it, so every later LocalCluster(data_dir)
        resolves to the same cluster.
        """
        if self._as is None or _reachable(self.data_dir.parent, self._as):
            return
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:16]
        base = pathlib.Path(RELOCATED_ROOT)
        base.mkdir(mode=0o711, exist_ok=True)
        home = base / digest
        home.mkdir(mode=0o700, exist_ok=True)
        self._chown(home)
        real = home / self.data_dir.name
        # init() runs only when data_dir holds no cluster, so a folder left
        # here belonged to a state dir since deleted: initdb needs it empty.
        shutil.rmtree(real, ignore_errors=True)
        real.mkdir()
        self._chown(real)
        if self.data_dir.is_symlink():
            self.data_dir.unlink()
        elif self.data_dir.exists():
            self.data_dir.rmdir()  # init() made it just now; initdb has not run
        self.data_dir.symlink_to(real, target_is_directory=True)
        self.data_dir = real
        self.log_file = self._log_path()

    # -- process plumbing -------------------------------------------------
    def _cmd(self, *args: str, check: bool = True, timeout: float = 120,
             as_server_user: bool = True) -> subprocess.CompletedProcess:
        kwargs: dict[str, Any] = {}
        if self._as is not None and as_server_user:
            kwargs = {"user": self._as.pw_uid, "group": self._as.pw_gid, "extra_groups": []}
        return subprocess.run(list(args), check=check, timeout=timeout, capture_output=True, text=True,
                              cwd="/", **kwargs)

    def _chown(self, path: pathlib.Path) -> None:
        if self._as is not None:
            os.chown(path, self._as.pw_uid, self._as.pw_gid)

    @property
    def initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").exists()

    def init(self) -> None:
        """initdb (trust auth on loopback only) and write our settings."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._as is not None:
            # The unprivileged server must be able to reach its folder.
            parent = self.data_dir.parent
            if parent.stat().st_uid == os.geteuid():
                parent.chmod(parent.stat().st_mode | 0o711)
        self._relocate_if_unreachable()
        self._chown(self.data_dir)
        self.log_file.touch()
        self._chown(self.log_file)
        try:
            self._cmd(str(self.bindir / "initdb"), "-D", str(self.data_dir), "-U", self.user,
                      "--auth=trust", "-E", "UTF8", "--locale=C")
        except subprocess.CalledProcessError as e:
            raise RuntimeError(f"initdb failed: {e.stderr or e.stdout}") from None
        self.write_settings()

    def write_settings(self) -> None:
        conf = self.data_dir / "postgresql.auto.conf"
        lines = [f"{k} = {v}" for k, v in {**self.settings, "port": str(self.port),
                                          "unix_socket_directories": f"'{self.data_dir}'"}.items()]
        conf.write_text("\n".join(lines) + "\n")
        self._chown(conf)

    def start(self, timeout: float = 60) -> None:
        """Start and wait until it accepts connections."""
        self.write_settings()
        res = self._cmd(str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file),
                        "-w", "-t", str(int(timeout)), "start", check=False, timeout=timeout + 10)
        if res.returncode != 0:
            tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise RuntimeError(f"postgres failed to start on port {self.port}: {res.stderr}\n{tail}")

    def stop(self, mode: str = "fast", timeout: float = 60) -> None:
        if not self.running():
            return
        self._cmd(str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w",
                  "-t", str(int(timeout)), "stop", check=False, timeout=timeout + 10)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return None

    def running(self) -> bool:
        pid = self.postmaster_pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False

    def kill(self) -> None:
        """SIGKILL the postmaster (an immediate crash), and wait for its children."""
        pid = self.postmaster_pid()
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self._children_alive():
                return
            time.sleep(0.05)

    def _children_alive(self) -> bool:
        # Backends hold the shared memory until they exit; restart waits for them.
        res = subprocess.run(["pgrep", "-f", f"-D {self.data_dir}"], capture_output=True, text=True)
        return bool(res.stdout.strip()) and self.running()

    # -- databases --------------------------------------------------------
    def dsn(self, dbname: str = "postgres") -> str:
        """Over TCP on 127.0.0.1 (what a proxy in between can splice into)."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def socket_dsn(self, dbname: str = "postgres") -> str:
        """Over the Unix socket in the data folder: the same server, but a round trip costs
        the client and the backend less CPU than over loopback TCP (findings.md: Unix socket),
        and every task is several round trips."""
        return f"postgresql://{self.user}@/{dbname}?host={self.data_dir}&port={self.port}"

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        res = self._cmd(str(self.bindir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                        "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, "-d", dbname, "-c", sql,
                        # A client needs no user switch (trust auth over TCP). Switching
                        # users forces a plain fork, whose atfork handlers in a process
                        # running gRPC threads occasionally crashed the child.
                        as_server_user=False)
        return res.stdout

    def create_database(self, name: str) -> None:
        """Create a database if it does not exist."""
        exists = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'").strip()
        if not exists:
            self.psql(f'CREATE DATABASE "{name}"')

    def ensure_started(self) -> None:
        if not self.initialized:
            self.init()
        if not self.running():
            self.start()
