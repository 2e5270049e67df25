"""A Spark Connect server from the PySpark wheel on 127.0.0.1, for tests and benchmarks.

It runs in the foreground under `spark-submit` (what the wheel's `sbin/start-connect-server.sh --wait`
does), with the driver options `burrow-report` gives its own local-mode JVM, and is always stopped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.ports import free_port, wait_port
from harness.processes import Process

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT = 180.0  # seconds for the JVM to start and listen (2 shared cores)


def spark_submit() -> Path:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    if not path.exists():
        raise FileNotFoundError(f"the PySpark wheel has no {path}: pip install 'burrow[spark]'")
    return path


def server_argv(port: int, master: str = "local[*]", driver_memory: str = "2g", log_level: str | None = None) -> list[str]:
    from burrow.spark.session import JAVA_OPTIONS, SESSION_SETTINGS

    argv = [str(spark_submit()), "--class", SERVER_CLASS, "--name", "Spark Connect server", "--master", master,
            "--driver-memory", driver_memory, "--driver-java-options", JAVA_OPTIONS,
            "--conf", "spark.ui.enabled=false", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", f"spark.connect.grpc.binding.port={port}"]
    argv += [arg for key, value in SESSION_SETTINGS.items() for arg in ("--conf", f"{key}={value}")]
    return argv + (["--conf", f"spark.log.level={log_level}"] if log_level else [])


@contextmanager
def connect_server(workdir: Path, master: str = "local[*]", log_level: str | None = None,
                   timeout: float = START_TIMEOUT) -> Iterator[tuple[str, Process]]:
    """Start a server with its working directory, temporary files and log under `workdir`; yields
    its sc:// URL and process once it listens."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_DIRS=str(workdir), PYSPARK_PYTHON=sys.executable,
               SPARK_CONNECT_MODE="0")  # as start-connect-server.sh: this JVM is the server, not a client
    server = Process(server_argv(port, master, log_level=log_level), log=workdir / "connect-server.log",
                     cwd=workdir, env=env)
    try:
        try:
            wait_port(port, server.proc, timeout=timeout)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {server.output()}") from exc
        yield f"sc://127.0.0.1:{port}", server
    finally:
        server.stop()
