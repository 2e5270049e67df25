"""A Spark Connect server from the PySpark wheel on 127.0.0.1, for tests and benchmarks.

It runs in the foreground under `spark-submit` (what the wheel's `sbin/start-connect-server.sh --wait`
does), with the command line of the server `burrow-report --keep-spark` keeps (spark/kept_server.py),
and is always stopped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from burrow.spark.kept_server import server_argv
from harness.ports import free_port, wait_port
from harness.processes import Process

START_TIMEOUT = 180.0  # seconds for the JVM to start and listen (2 shared cores)


@contextmanager
def connect_server(workdir: Path, master: str = "local[*]", log_level: str | None = None,
                   timeout: float = START_TIMEOUT) -> Iterator[tuple[str, Process]]:
    """Start a server with its working directory, temporary files and log under `workdir`; yields
    its sc:// URL and process once it listens."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_DIRS=str(workdir), PYSPARK_PYTHON=sys.executable,
               SPARK_CONNECT_MODE="0")  # as start-connect-server.sh: this JVM is the server, not a client
    conf = {"spark.log.level": log_level} if log_level else None
    server = Process(server_argv(port, master, conf=conf), log=workdir / "connect-server.log",
                     cwd=workdir, env=env)
    try:
        try:
            wait_port(port, server.proc, timeout=timeout)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {server.output()}") from exc
        yield f"sc://127.0.0.1:{port}", server
    finally:
        server.stop()
