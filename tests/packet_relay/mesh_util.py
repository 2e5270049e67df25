"""Three burrow-relay processes meshed on 127.0.0.1 (one shared certificate, one mesh key), for the
mesh tests and the cross-node benchmark row."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from burrow.client.derp import DerpClient
from burrow.packet_relay.tls import generate_self_signed
from harness.ports import free_port, wait_http
from harness.processes import Process, burrow

TIMEOUT = 10.0


class Node:
    """One relay process; `start()` again after `kill()` restarts it on the same ports and key."""

    def __init__(self, workdir: Path, name: str, cert: str, key: str, mesh_key_file: Path,
                 host: str = "127.0.0.1", port: int | None = None, hosts_file: Path | None = None) -> None:
        """`hosts_file`: run the relay in its own mount namespace with this file as /etc/hosts."""
        self.workdir, self.name, self.host = workdir, name, host
        self.cert, self.key, self.mesh_key_file = cert, key, mesh_key_file
        self.port, self.admin_port = port or free_port(host=host), free_port()
        self.hosts_file = hosts_file
        self.mesh_with = ""
        self.extra: list[str] = []
        self.proc: Process | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def start(self) -> None:
        args = ["--host", self.host, "--https-port", str(self.port), "--tls-cert", self.cert,
                "--tls-key", self.key, "--stun-port", "0", "--admin-port", str(self.admin_port),
                "--key-file", str(self.workdir / f"{self.name}.key"), "--node-name", self.name,
                "--mesh-key-file", str(self.mesh_key_file), "--mesh-with", self.mesh_with,
                "--mesh-ca-file", self.cert, "--event-log", str(self.workdir / f"{self.name}.jsonl"),
                "--shutdown-grace", "0.2", *self.extra]
        if self.hosts_file is None:
            self.proc = burrow("packet_relay", *args, log=self.workdir / f"{self.name}.log")
        else:
            self.proc = Process(["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"',
                                 str(self.hosts_file), sys.executable, "-m", "burrow.packet_relay", *args],
                                log=self.workdir / f"{self.name}.log")
        wait_http(f"http://127.0.0.1:{self.admin_port}/readyz", self.proc.proc)

    def kill(self) -> None:
        self.proc.kill()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def readyz(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/readyz", timeout=5) as r:
            return r.read().decode()

    def metric(self, name: str, labels: str = "") -> float:
        pattern = re.escape(name + (("{" + labels + "}") if labels else "")) + r" ([0-9.e+]+)"
        found = re.search(r"^" + pattern, self.metrics(), re.M)
        return float(found.group(1)) if found else 0.0

    def client(self, **kw) -> DerpClient:
        return DerpClient(self.url, ca_file=self.cert, connect_timeout=TIMEOUT, **kw)


class Mesh:
    """`n` nodes, each listing every node (itself included) in --mesh-with."""

    def __init__(self, workdir: Path, n: int = 3, extra: list[str] | None = None,
                 nodes: list[Node] | None = None) -> None:
        if nodes is not None:
            self.nodes = nodes
            return
        cert, key = generate_self_signed(str(workdir / "tls"), ("127.0.0.1", "localhost"))
        mesh_key = workdir / "mesh.key"
        mesh_key.write_text(os.urandom(32).hex() + "\n")
        self.nodes = [Node(workdir, f"node{i}", cert, key, mesh_key) for i in range(n)]
        for node in self.nodes:
            node.mesh_with = ",".join(n.url for n in self.nodes)
            node.extra = list(extra or [])

    def __enter__(self) -> Mesh:
        try:
            for node in self.nodes:
                node.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for node in self.nodes:
            node.stop()

    def wait_meshed(self, timeout: float = 30.0) -> None:
        """Until every node has a live link to every other node."""
        want = len(self.nodes) - 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(node.proc.alive() and node.metric("burrow_relay_mesh_peers_up") == want for node in self.nodes):
                return
            time.sleep(0.1)
        raise AssertionError("mesh did not come up: " + ", ".join(
            f"{n.name}={n.metric('burrow_relay_mesh_peers_up')}" for n in self.nodes))


async def exchange(a: DerpClient, b: DerpClient, payload: bytes, attempts: int = 100) -> None:
    """Send from a to b until one arrives (the peer learns b's key a moment after b connects)."""
    for _ in range(attempts):
        await a.send(b.public_key, payload)
        try:
            while True:
                src, got = await b.recv(timeout=0.1)
                if got == payload:
                    assert src == a.public_key
                    return
        except TimeoutError:
            continue
    raise AssertionError(f"{payload!r} never arrived")


async def drain(c: DerpClient) -> None:
    while not c.packets.empty():
        c.packets.get_nowait()
    await asyncio.sleep(0)


def private_hosts_file(workdir: Path, name: str, addresses: list[str]) -> Path:
    """A hosts file where `name` resolves to every one of `addresses`; fails (one clear line) when this
    machine cannot give a process its own /etc/hosts."""
    path = workdir / "hosts"
    path.write_text("127.0.0.1 localhost\n" + "".join(f"{a} {name}\n" for a in addresses))
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f'mount --bind "{path}" /etc/hosts && getent ahosts {name}'],
                           capture_output=True, text=True, timeout=20)
    assert probe.returncode == 0 and all(a in probe.stdout for a in addresses), (
        "DNS discovery test needs `unshare -m` and `mount --bind` (root or CAP_SYS_ADMIN) to give the relays "
        f"a private /etc/hosts: {probe.stderr.strip()}")
    return path
