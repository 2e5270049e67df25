"""Start a program as a child process and always get rid of it: SIGTERM, a bounded wait, then SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
STOP_TIMEOUT = 10.0  # seconds a process gets to exit after SIGTERM before SIGKILL


def stop(proc: subprocess.Popen, timeout: float = STOP_TIMEOUT, sig: int = signal.SIGTERM) -> int:
    """Ask `proc` to exit with `sig`; kill it if it has not within `timeout`. Returns its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL, as a crash would: nothing runs in the process after this."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(STOP_TIMEOUT)


class Process:
    """One child process. Output goes to `log` (a file) or, with `log=None`, to a pipe `wait_line` reads.

    A context manager: leaving the block stops it.
    """

    def __init__(self, argv: list[str], *, log: Path | None = None, cwd: Path = ROOT,
                 env: dict[str, str] | None = None, **popen) -> None:
        self.argv = argv
        self.log = log
        full_env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
        if log is not None:
            self._out = open(log, "ab")  # noqa: SIM115 - closed in stop()
            popen.setdefault("stdout", self._out)
            popen.setdefault("stderr", subprocess.STDOUT)
        else:
            self._out = None
            popen.setdefault("stdout", subprocess.PIPE)
            popen.setdefault("stderr", subprocess.STDOUT)
            popen.setdefault("text", True)
        self.proc = subprocess.Popen(argv, cwd=cwd, env=full_env, **popen)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_line(self, pattern: str, timeout: float = 20.0) -> re.Match:
        """Read piped output until a line matches `pattern` (a start-up line naming the bound port)."""
        assert self.proc.stdout is not None, "wait_line needs log=None (piped output)"
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.argv[:3]} exited during start-up: {''.join(seen)[-2000:]}")
            seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found
        raise RuntimeError(f"{self.argv[:3]} printed no line matching {pattern!r} within {timeout}s")

    def output(self) -> str:
        """What the process wrote to its log file so far (the tail worth showing in a failure)."""
        return self.log.read_text(errors="replace")[-4000:] if self.log and self.log.exists() else ""

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        code = stop(self.proc, timeout)
        if self._out is not None:
            self._out.close()
        if self.proc.stdout is not None and self._out is None:
            self.proc.stdout.close()
        return code

    def kill(self) -> None:
        kill(self.proc)

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def burrow(module: str, *args: str, **kwargs) -> Process:
    """`python -m burrow.<module> ARGS` (mailbox_server, transit_relay, packet_relay, ...)."""
    return Process([sys.executable, "-m", f"burrow.{module}", *args], **kwargs)
