"""Real processes for the messaging end-to-end tests: burrow-discovery replicas, haproxy in front of them,
burrow-relay with its messaging port, and `burrow messaging` clients. All on 127.0.0.1, all torn down."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:4]} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


class Processes:
    """Starts processes and stops every one of them (SIGTERM, then SIGKILL) at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []

    def spawn(self, args: list[str], name: str, **kw) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(args, stdout=kw.pop("stdout", log), stderr=log, cwd=ROOT, **kw)
        proc.log_path = self.tmp / f"{name}.log"
        self.procs.append(proc)
        return proc

    def discovery(self, name: str, redis_url: str | None = None, ttl: float = 60.0) -> str:
        port = free_port()
        args = [sys.executable, "-m", "burrow.discovery", "--host", "127.0.0.1", "--port", str(port),
                "--admin-port", "0", "--entry-ttl", str(ttl)]
        if redis_url:
            args += ["--redis-url", redis_url]
        wait_port(port, self.spawn(args, name))
        return f"http://127.0.0.1:{port}"

    def haproxy(self, backends: list[str]) -> str:
        exe = shutil.which("haproxy")
        if exe is None:
            pytest.fail("haproxy is not installed (Debian package: haproxy)")
        port = free_port()
        servers = "\n".join(f"    server d{i} {b.removeprefix('http://')}" for i, b in enumerate(backends))
        cfg = self.tmp / "haproxy.cfg"
        cfg.write_text(f"""global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    option http-server-close
frontend discovery
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
{servers}
""")
        wait_port(port, self.spawn([exe, "-f", str(cfg), "-db"], "haproxy"))
        return f"http://127.0.0.1:{port}"

    def redis(self) -> str:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed (Debian package: redis-server)")
        port = free_port()
        proc = self.spawn([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                           "--dir", str(self.tmp)], "redis")
        wait_port(port, proc)
        return f"redis://127.0.0.1:{port}/0"

    def relay(self, name: str, discovery: str, refresh: float = 20.0) -> tuple[subprocess.Popen, str]:
        """A relay with messaging on; returns (process, 'PUBKEY@127.0.0.1:PORT')."""
        port = free_port()
        args = [sys.executable, "-m", "burrow.packet_relay", "--host", "127.0.0.1", "--https-port", "-1",
                "--stun-port", "0", "--admin-port", "0", "--messaging-port", str(port),
                "--messaging-key-file", str(self.tmp / f"{name}.key"), "--discovery-url", discovery,
                "--discovery-refresh", str(refresh)]
        proc = self.spawn(args, name)
        wait_port(port, proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if m := re.search(rb"messaging up: port \d+ key ([0-9a-f]{66})", proc.log_path.read_bytes()):
                return proc, f"{m.group(1).decode()}@127.0.0.1:{port}"
            time.sleep(0.05)
        raise RuntimeError(f"relay {name} did not log its messaging key")

    def client(self, name: str, *args: str) -> subprocess.Popen:
        return self.spawn([sys.executable, "-m", "burrow.client.cli", "messaging", *args], name,
                          stdout=subprocess.PIPE, env={**os.environ, "BURROW_LOG_LEVEL": "INFO"})

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
