"""Skywire messaging as processes: burrow-discovery replicas, haproxy balancing them per request,
burrow-relay with its messaging port, and `burrow messaging` clients. Everything on 127.0.0.1."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from .haproxy import HAProxy
from .ports import free_port, wait_port
from .processes import Process, burrow

MESSAGING_UP = r"messaging up: port (\d+) key ([0-9a-f]{66})"


def discovery(workdir: Path, name: str, redis_url: str | None = None, ttl: float = 60.0,
              *args: str) -> tuple[Process, str]:
    """A burrow-discovery replica; returns (process, its URL)."""
    port = free_port()
    argv = ["--host", "127.0.0.1", "--port", str(port), "--admin-port", "0", "--entry-ttl", str(ttl), *args]
    if redis_url:
        argv += ["--redis-url", redis_url]
    proc = burrow("discovery", *argv, log=workdir / f"{name}.log")
    wait_port(port, proc.proc)
    return proc, f"http://127.0.0.1:{port}"


def balanced(workdir: Path, urls: list[str]) -> tuple[HAProxy, str]:
    """haproxy in HTTP mode, round robin per request over the discovery replicas at `urls`."""
    port = free_port()
    servers = "\n".join(f"    server d{i} {u.removeprefix('http://')}" for i, u in enumerate(urls))
    config = (f"frontend discovery\n    mode http\n    option http-server-close\n    bind 127.0.0.1:{port}\n"
              f"    timeout client 30s\n    default_backend replicas\n\n"
              f"backend replicas\n    mode http\n    balance roundrobin\n    timeout server 30s\n{servers}\n")
    return HAProxy(workdir / "haproxy", config), f"http://127.0.0.1:{port}"


def relay(workdir: Path, name: str, discovery_url: str | None = None, refresh: float = 20.0, *args: str,
          prefix: tuple[str, ...] = ()) -> tuple[Process, str]:
    """burrow-relay with messaging on (and DERP HTTPS off unless `args` turn it on); returns
    (process, 'PUBKEY@127.0.0.1:PORT'). `prefix` goes before the interpreter (e.g. taskset)."""
    argv = ["--host", "127.0.0.1", "--https-port", "-1", "--stun-port", "0", "--admin-port", "0",
            "--messaging-port", str(free_port()), "--messaging-key-file", str(workdir / f"{name}.key"), *args]
    if discovery_url:
        argv += ["--discovery-url", discovery_url, "--discovery-refresh", str(refresh)]
    log = workdir / f"{name}.log"
    proc = Process([*prefix, sys.executable, "-m", "burrow.packet_relay", *argv], log=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if m := re.search(MESSAGING_UP, log.read_text(errors="replace")):
            wait_port(int(m.group(1)), proc.proc)
            return proc, f"{m.group(2)}@127.0.0.1:{m.group(1)}"
        if not proc.alive():
            break
        time.sleep(0.05)
    proc.stop()
    raise RuntimeError(f"relay {name} did not start its messaging port: {proc.output()}")


def client(workdir: Path, name: str, *args: str) -> Process:
    """`burrow messaging ARGS`: stdout piped (wait_line / readline), stderr to WORKDIR/NAME.log."""
    stderr = open(workdir / f"{name}.log", "ab")  # noqa: SIM115 - the process owns it until it exits
    proc = Process([sys.executable, "-m", "burrow.client.cli", "messaging", *args], stderr=stderr)
    proc.stderr_path = workdir / f"{name}.log"
    return proc
