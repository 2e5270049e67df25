"""Free loopback ports and waiting for a server to answer on one."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request

START_TIMEOUT = 20.0  # seconds a server gets to start listening


def free_port(kind: int = socket.SOCK_STREAM, host: str = "127.0.0.1") -> int:
    """A port that was free on `host` a moment ago (TCP by default, SOCK_DGRAM for UDP), for processes that
    cannot report a port 0 back."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, kind) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen | None = None, host: str = "127.0.0.1",
              timeout: float = START_TIMEOUT) -> None:
    """Wait until `port` accepts TCP connections; fail early if the server process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listened on {host}:{port} within {timeout}s")


def wait_http(url: str, proc: subprocess.Popen | None = None, timeout: float = START_TIMEOUT) -> None:
    """Wait until GET `url` answers 200 (an admin port's /healthz or /readyz)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer 200 within {timeout}s")
        time.sleep(0.1)
