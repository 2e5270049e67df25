"""Small helpers the benchmarks share: free loopback ports and waiting for a server to listen."""

from __future__ import annotations

import socket
import subprocess
import time


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port that was free on 127.0.0.1 a moment ago (TCP by default, SOCK_DGRAM for UDP)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, host: str = "127.0.0.1", timeout: float = 30.0) -> None:
    """Wait until `port` accepts TCP connections; fail early if the server process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")
