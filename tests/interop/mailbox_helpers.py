"""Start our mailbox server (and the reference transit relay) as real subprocesses on 127.0.0.1."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
WORMHOLE = str(VENV_BIN / "wormhole")
TWIST = str(VENV_BIN / "twist")


class MailboxProcess:
    """`python -m burrow.mailbox_server` on 127.0.0.1; `port` is read from its start-up line."""

    def __init__(self, db: str, port: int = 0, extra: list[str] | None = None) -> None:
        self.db = db
        self.port = port
        self.extra = extra or []
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> MailboxProcess:
        cmd = [sys.executable, "-m", "burrow.mailbox_server", "--host", "127.0.0.1", "--port", str(self.port),
               "--db", self.db, "--admin-port", "-1", *self.extra]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        deadline = time.monotonic() + 20
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("mailbox server exited during start-up")
            found = re.search(r"listening on port (\d+)", line)
            if found:
                self.port = int(found.group(1))
                return self
        raise RuntimeError("mailbox server did not report its port")

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TransitRelay:
    """The reference transit relay (`twist transitrelay`) on a free loopback port, for file transfers."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([TWIST, "transitrelay", f"--port=tcp:{self.port}:interface=127.0.0.1"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("transit relay did not start")

    @property
    def hint(self) -> str:
        return f"tcp:127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def wormhole(url: str, transit: str, *args: str) -> list[str]:
    return [WORMHOLE, "--relay-url", url, "--transit-helper", transit, *args]
