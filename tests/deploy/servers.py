"""Run one Burrow server as a subprocess on loopback with ephemeral ports, for scraping its /metrics."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.deploy.chart_util import REPO

# service -> (python package, flags besides the admin ones)
SERVICES = {
    "mailbox": ("burrow.mailbox_server", ["--host", "127.0.0.1", "--port", "0", "--db", "{tmp}/mailbox.sqlite"]),
    "transit": ("burrow.transit_relay", ["--host", "127.0.0.1", "--port", "0", "--websocket-port", "0"]),
    "relay": ("burrow.packet_relay", ["--host", "127.0.0.1", "--https-port", "0", "--stun-port", "{udp}",
                               "--dev-tls", "--tls-dir", "{tmp}/tls", "--key-file", "{tmp}/relay.key"]),
}


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port the kernel just handed out on 127.0.0.1 (for processes that cannot report port 0 back)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(service: str, tmp: Path, timeout: float = 20.0) -> Iterator[str]:
    """Start `python -m <package>` and yield its admin base URL once /healthz answers."""
    package, args = SERVICES[service]
    admin = free_port()
    argv = [a.format(tmp=tmp, udp=free_port(socket.SOCK_DGRAM)) for a in args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BURROW_")}
    log = open(tmp / f"{service}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", package, *argv, "--admin-host", "127.0.0.1",
                             "--admin-port", str(admin)], cwd=REPO, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{admin}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{service} exited: {(tmp / f'{service}.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{service} admin did not answer: {(tmp / f'{service}.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def metric_families(url: str) -> set[str]:
    """Family names exposed at url/metrics, with the sample names (_total, _bucket, ...) included."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _hash, _type, name, kind = line.split()[:4]
            names.add(name)
            if kind == "counter" and not name.endswith("_total"):  # older text format
                names.add(name + "_total")
        elif line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names
