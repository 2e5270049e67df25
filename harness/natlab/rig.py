"""Network namespaces for NAT tests: create them, run commands in them, always tear them down.

A `Lab` owns every namespace and process it starts. Names are `nl<pid>-<role>` (the pid of the process
that made the lab, plus a counter when one process makes several labs), so concurrent runs never collide
and `Lab.reap_stale()` can remove the leftovers of a run that was killed before it could clean up (only
namespaces whose owning pid no longer runs). Namespaces are wired to each other only: no interface
reaches the host's own network, so nothing a test sends can leave the machine.

    with Lab() as lab:
        ns = lab.netns("inet")
        lab.sh(ns, "ip addr")
        proc = lab.spawn(ns, [sys.executable, "-m", "burrow.packet_relay", ...], log="relay.log")

Teardown (also on exceptions, SIGTERM and interpreter exit): terminate the processes we spawned, kill
whatever still runs inside our namespaces (only processes in namespaces this lab created), delete them.
In-process sockets can be made inside a namespace with `inside(ns)` (setns for the calling thread).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from burrow.common.processes import alive

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")
STOP_GRACE = 3.0  # seconds a spawned process gets between SIGTERM and SIGKILL
COMMAND_TIMEOUT = 30.0  # seconds for one setup command
REQUIRED_TOOLS = ("ip", "iptables-nft", "iptables-legacy")
ETC_NETNS = Path("/etc/netns")  # per-namespace /etc files that `ip netns exec` mounts (only ours are touched)

_counter = itertools.count()
_libc = ctypes.CDLL(None, use_errno=True)


class LabError(RuntimeError):
    """A setup command failed (its stderr is in the message) or a tool is missing."""


def missing_requirements(tools: tuple[str, ...] = REQUIRED_TOOLS) -> str | None:
    """One line naming what this machine lacks for the lab, or None."""
    if os.geteuid() != 0:
        return "natlab needs root (network namespaces, iptables)"
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        return f"natlab needs {', '.join(absent)} (Debian packages: iproute2, iptables)"
    return None


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def inside(ns: str) -> Iterator[None]:
    """Run the block with this thread in namespace `ns`; sockets made here stay there."""
    with open("/proc/thread-self/ns/net") as home, open(NETNS_DIR / ns) as target:
        _setns(target.fileno())
        try:
            yield
        finally:
            _setns(home.fileno())


class Lab:
    """The namespaces and processes of one test run."""

    def __init__(self, workdir: Path | None = None):
        n = next(_counter)
        self.prefix = f"nl{os.getpid()}" + (f"x{n}" if n else "")
        self.workdir = Path(workdir) if workdir else Path(f"/tmp/{self.prefix}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.namespaces: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self._closed = False
        self._old_sigterm = None

    # ---- lifecycle
    def __enter__(self) -> Lab:
        problem = missing_requirements()
        if problem:
            raise LabError(problem)
        self.reap_stale()
        atexit.register(self.close)
        with contextlib.suppress(ValueError):  # not the main thread: atexit still covers us
            self._old_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _on_sigterm(self, signum, frame) -> None:
        self.close()
        raise SystemExit(128 + signum)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + STOP_GRACE
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.monotonic()))
            if p.poll() is None:
                p.kill()
                p.wait()
        for ns in reversed(self.namespaces):
            self._kill_inside(ns)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)
        self.namespaces.clear()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        if self._old_sigterm is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, self._old_sigterm)

    @staticmethod
    def _kill_inside(ns: str) -> None:
        """SIGKILL what still runs in a namespace we made (daemons such as miniupnpd fork away)."""
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for pid in out.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)

    @staticmethod
    def reap_stale() -> list[str]:
        """Delete namespaces left by labs whose process is gone (killed before teardown)."""
        gone = []
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
        for line in names:
            m = re.match(r"(nl(\d+)(?:x\d+)?-\S+)", line)
            if m and not alive(int(m.group(2))):
                Lab._kill_inside(m.group(1))
                subprocess.run(["ip", "netns", "del", m.group(1)], capture_output=True)
                shutil.rmtree(ETC_NETNS / m.group(1), ignore_errors=True)
                gone.append(m.group(1))
        return gone

    # ---- namespaces and commands
    def netns(self, role: str) -> str:
        """Create namespace `<prefix>-<role>` with loopback up and return its name."""
        name = f"{self.prefix}-{role}"
        self.cmd("ip", "netns", "add", name)
        self.namespaces.append(name)
        self.cmd("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def hosts_file(self, ns: str, names: dict[str, list[str]]) -> None:
        """Name resolution inside `ns` for what runs there through `ip netns exec` (run, spawn): it
        bind-mounts /etc/netns/<ns>/hosts over /etc/hosts. {name: [addresses]}, IPv4 and IPv6 alike."""
        d = ETC_NETNS / ns
        d.mkdir(parents=True, exist_ok=True)
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        lines += [f"{addr} {name}" for name, addrs in names.items() for addr in addrs]
        (d / "hosts").write_text("\n".join(lines) + "\n")

    def cmd(self, *argv: str, timeout: float = COMMAND_TIMEOUT) -> str:
        """Run a setup command on the host side (e.g. `ip -n NS ...`); returns stdout, raises LabError."""
        res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise LabError(f"{' '.join(argv)}: exit {res.returncode}: {res.stderr.strip()}")
        return res.stdout

    def run(self, ns: str, argv: list[str], *, timeout: float = COMMAND_TIMEOUT, check: bool = True,
            input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
        """Run `argv` inside `ns` and wait for it."""
        res = subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                             timeout=timeout, input=input, env=env)
        if check and res.returncode != 0:
            raise LabError(f"[{ns}] {' '.join(argv)}: exit {res.returncode}: {res.stderr.strip()[-2000:]}")
        return res

    def sh(self, ns: str, script: str, **kw) -> str:
        return self.run(ns, ["sh", "-ec", script], **kw).stdout

    def spawn(self, ns: str, argv: list[str], *, log: str | None = None, env: dict | None = None,
              cwd: Path | None = None, stdin=subprocess.DEVNULL) -> subprocess.Popen:
        """Start `argv` inside `ns` in the background; stopped at teardown. Output goes to workdir/log."""
        out = open(self.workdir / log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        try:
            p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=out, stderr=subprocess.STDOUT,
                                 stdin=stdin, env=env, cwd=cwd or self.workdir)
        finally:
            if log:
                out.close()
        self.procs.append(p)
        return p

    def log(self, name: str) -> str:
        path = self.workdir / name
        return path.read_text(errors="replace") if path.exists() else ""
