"""Debian's haproxy as the tests' and benchmarks' own load balancer, in TCP mode on 127.0.0.1.

`HAProxy(workdir, config)` writes the configuration (the `global`/`defaults` below plus the caller's
frontends and backends), starts `haproxy -db` in the foreground and waits until it serves.
A runtime socket (`stats socket`) lets a test take servers in and out: `haproxy.command("disable
server be/s1")`.
"""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

from .processes import Process

HAPROXY = "haproxy"
INSTALL_HINT = "apt-get install -y haproxy"

BASE = """global
    maxconn 4000  # fits the default open-file limit (haproxy needs about 2 per connection)
    stats socket {sock} mode 600 level admin

defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h

"""


def require_haproxy() -> None:
    if shutil.which(HAPROXY) is None:
        raise RuntimeError(f"haproxy is not installed; run: {INSTALL_HINT}")


class HAProxy:
    def __init__(self, workdir: Path, config: str, *, check: bool = True) -> None:
        require_haproxy()
        workdir.mkdir(parents=True, exist_ok=True)
        self.sock = workdir / "haproxy.sock"
        self.path = workdir / "haproxy.cfg"
        self.path.write_text(BASE.format(sock=self.sock) + config)
        if check:
            out = Process([HAPROXY, "-c", "-f", str(self.path)], log=workdir / "haproxy-check.log")
            if out.proc.wait(30) != 0:
                raise RuntimeError(f"haproxy refused the configuration: {out.output()}")
        self.process = Process([HAPROXY, "-db", "-f", str(self.path)], log=workdir / "haproxy.log")
        # Ready once the runtime socket answers: haproxy binds every listener before it serves that socket.
        # (Probing a frontend port instead would open a connection to a backend server.)
        deadline = time.monotonic() + 20
        while True:
            if not self.process.alive():
                raise RuntimeError(f"haproxy exited: {self.process.output()}")
            try:
                if "Pid:" in self.command("show info"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"haproxy did not start: {self.process.output()}")
            time.sleep(0.05)

    def command(self, line: str) -> str:
        """One command on the runtime API socket (e.g. `show servers state`, `disable server be/s1`)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.sock))
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def stop(self) -> None:
        self.process.stop()

