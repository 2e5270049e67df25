"""Debian's redis-server as the tests' and benchmarks' own process: one server, or a 3-master Cluster.

Each server runs on 127.0.0.1 on a free port with its data in a temporary directory; AOF is on with
`appendfsync always` unless told otherwise, so a restart keeps every acknowledged write.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from .ports import free_port
from .processes import Process, kill, stop

REDIS_SERVER = "redis-server"
REDIS_CLI = "redis-cli"
INSTALL_HINT = "apt-get install -y redis-server"


def require_redis() -> None:
    """Fail with one line naming the missing tool and how to install it (never a silent skip)."""
    for tool in (REDIS_SERVER, REDIS_CLI):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed; run: {INSTALL_HINT}")


def cluster_port() -> int:
    """A free port a cluster node can use: at most 55535, with its bus port (port + 10000) free too."""
    for _ in range(200):
        port = free_port()
        if port > 55535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for a Redis Cluster node")


class RedisServer:
    """`redis-server` on 127.0.0.1:`port`, data in `workdir`. `url` is what --redis-url takes."""

    def __init__(self, workdir: Path, *, port: int | None = None, appendfsync: str = "always",
                 cluster: bool = False, extra: tuple[str, ...] = ()) -> None:
        require_redis()
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or (cluster_port() if cluster else free_port())
        self.appendfsync = appendfsync
        self.cluster = cluster
        self.extra = extra
        self.process: Process | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0" if not self.cluster else f"redis://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        argv = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
                "--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", "",
                "--protected-mode", "no", "--daemonize", "no", "--logfile", ""]
        if self.cluster:
            argv += ["--cluster-enabled", "yes", "--cluster-config-file", str(self.workdir / "nodes.conf"),
                     "--cluster-node-timeout", "2000"]
        return argv + list(self.extra)

    def start(self, timeout: float = 20.0) -> None:
        self.process = Process(self.argv(), log=self.workdir / "redis.log", cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while self.cli("PING") != "PONG":
            if not self.process.alive():
                raise RuntimeError(f"redis-server exited: {self.process.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not answer PING: {self.process.output()}")
            time.sleep(0.05)

    def cli(self, *args: str) -> str:
        """One redis-cli command against this server; its output, stripped ('' when it failed)."""
        out = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), *args],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else ""

    def stop(self) -> None:
        """SIGTERM: Redis flushes its AOF and exits."""
        if self.process is not None:
            stop(self.process.proc, 20)

    def kill(self) -> None:
        """SIGKILL: a crash; only what `appendfsync` already wrote survives."""
        if self.process is not None:
            kill(self.process.proc)

    def restart(self) -> None:
        self.stop()
        self.start()


class RedisCluster:
    """Three masters with no replicas on 127.0.0.1, joined with `redis-cli --cluster create`."""

    def __init__(self, workdir: Path, masters: int = 3) -> None:
        self.nodes = [RedisServer(workdir / f"node{i}", cluster=True) for i in range(masters)]
        try:
            addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
            out = subprocess.run([REDIS_CLI, "--cluster", "create", *addrs, "--cluster-replicas", "0",
                                  "--cluster-yes"], capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout[-1500:]}{out.stderr[-500:]}")
            deadline = time.monotonic() + 30
            while not all("cluster_state:ok" in n.cli("CLUSTER", "INFO") for n in self.nodes):
                if time.monotonic() > deadline:
                    raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")
                time.sleep(0.1)
        except Exception:
            self.stop()
            raise

    @property
    def url(self) -> str:
        """Any one master's URL: the client discovers the others."""
        return self.nodes[0].url

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()
