"""burrow-report on a real Spark standalone cluster: a master and one worker started with the PySpark wheel's
`spark-class` on 127.0.0.1, the report run with `--master spark://...`, every table compared with local mode's."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burrow.spark.generate import generate
from burrow.spark.job import ORDER
from harness.ports import free_port, wait_port
from harness.processes import ROOT, Process

# two report runs and three JVMs; the machine may be shared, so the bound is generous
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

START_TIMEOUT = 120.0  # seconds for a JVM to start and the worker to register (2 shared cores)


def _spark_class() -> Path:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        pytest.fail(f"the PySpark wheel has no {path}: pip install 'burrow[spark]'")
    return path


def _wait_log(proc: Process, text: str, timeout: float = START_TIMEOUT) -> None:
    """Wait until `text` appears in the process's log file; fail early if it exits."""
    deadline = time.monotonic() + timeout
    while text not in proc.log.read_text(errors="replace"):
        if not proc.alive():
            raise RuntimeError(f"{proc.argv[-1]} exited: {proc.output()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {text!r} within {timeout}s: {proc.output()}")
        time.sleep(0.2)


@pytest.fixture
def cluster(tmp_path):
    """A standalone master and one worker (2 cores, 2 GB) on loopback; yields the master URL."""
    spark_class = str(_spark_class())
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp_path / "spark-logs"),
               SPARK_WORKER_DIR=str(tmp_path / "work"), PYSPARK_PYTHON=sys.executable,
               # the REST submission server would take the fixed port 6066 (a second cluster could not start)
               SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
    port, worker_port = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    master = Process([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                      "--port", str(port), "--webui-port", str(free_port())],
                     log=tmp_path / "master.log", env=env)
    worker = None
    try:
        wait_port(port, master.proc, timeout=START_TIMEOUT)
        worker = Process([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                          "--port", str(worker_port), "--webui-port", str(free_port()), "--cores", "2",
                          "--memory", "2g", "--work-dir", str(tmp_path / "work"), url],
                         log=tmp_path / "worker.log", env=env)
        _wait_log(worker, "Successfully registered with master")
        yield url
    finally:
        if worker is not None:
            worker.stop()
        master.stop()


def _report(logs: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.run([sys.executable, "-m", "burrow.spark", "--logs", str(logs / "*.jsonl"), "--out", str(out),
                           *extra], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def _same(a: str, b: str) -> bool:
    """Equal text, or equal floats up to rounding: sums may add steps at the same instant in another
    order, and the per-minute byte level is a running sum over the whole span (a millionth of a byte)."""
    if a == b:
        return True
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-6)
    except ValueError:
        return False


def test_report_on_a_standalone_cluster_equals_local_mode(cluster, tmp_path):
    logs = tmp_path / "logs"
    gen = generate(str(logs), events=2000, days=2, nodes=2, malformed=2)
    local = _report(logs, tmp_path / "local", "--master", "local[2]")
    assert local.returncode == 0, local.stderr[-3000:]
    remote = _report(logs, tmp_path / "cluster", "--master", cluster)
    assert remote.returncode == 0, remote.stderr[-3000:]
    assert f"starting Spark on {cluster}" in remote.stderr
    assert f"{sum(gen.counts.values()):,} events in the dataset" in remote.stderr
    assert "malformed 2" in remote.stderr
    # the job really ran on the worker: it launched an executor for the application
    assert any((tmp_path / "work").glob("app-*/*/stderr")), "the worker ran no executor"
    for name in ORDER:
        want, got = _rows(tmp_path / "local" / "tables" / f"{name}.csv"), _rows(tmp_path / "cluster" / "tables" /
                                                                               f"{name}.csv")
        assert len(want) > 1, f"{name}: local mode wrote no rows"
        assert got[0] == want[0], f"{name}: columns differ"
        assert len(got) == len(want), f"{name}: {len(got) - 1} rows on the cluster, {len(want) - 1} in local mode"
        for i, (w, g) in enumerate(zip(want[1:], got[1:], strict=True), start=1):
            assert len(g) == len(w) and all(map(_same, w, g)), f"{name} row {i}: cluster {g} != local {w}"
