"""Run one Burrow server as a subprocess on loopback with ephemeral ports, for scraping its /metrics."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from harness.ports import free_port, wait_http
from harness.processes import Process
from tests.deploy.chart_util import REPO

# service -> (python package, flags besides the admin ones)
SERVICES = {
    "mailbox": ("burrow.mailbox_server", ["--host", "127.0.0.1", "--port", "0", "--db", "{tmp}/mailbox.sqlite"]),
    "transit": ("burrow.transit_relay", ["--host", "127.0.0.1", "--port", "0", "--websocket-port", "0"]),
    "relay": ("burrow.packet_relay", ["--host", "127.0.0.1", "--https-port", "0", "--stun-port", "{udp}",
                               "--dev-tls", "--tls-dir", "{tmp}/tls", "--key-file", "{tmp}/relay.key"]),
}


@contextlib.contextmanager
def running(service: str, tmp: Path, timeout: float = 20.0) -> Iterator[str]:
    """Start `python -m <package>` and yield its admin base URL once /healthz answers."""
    package, args = SERVICES[service]
    admin = free_port()
    argv = [a.format(tmp=tmp, udp=free_port(socket.SOCK_DGRAM)) for a in args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BURROW_")}
    url = f"http://127.0.0.1:{admin}"
    with Process([sys.executable, "-m", package, *argv, "--admin-host", "127.0.0.1", "--admin-port", str(admin)],
                 log=tmp / f"{service}.log", cwd=REPO, env=env) as proc:
        try:
            wait_http(url + "/healthz", proc.proc, timeout)
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"{service}: {exc}: {proc.output()[-2000:]}") from None
        yield url


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
