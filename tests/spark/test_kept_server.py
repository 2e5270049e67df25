"""burrow-report --keep-spark: the first run starts a Spark Connect server (from the PySpark wheel, on
127.0.0.1, behind a token) and reports through it; later runs use it; it stops when told (after the
reports using it) or once unused for the given time. Every table equals local mode's."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burrow.common.processes import alive
from burrow.spark.generate import generate
from tests.spark.test_connect import _kept_sessions, _same_tables

# two server JVMs and five report runs on a possibly shared machine: a generous bound
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def _env(cwd: Path) -> dict[str, str]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", XDG_CACHE_HOME=str(cwd / "cache"))
    for name in ("BURROW_SPARK_REMOTE", "BURROW_SPARK_KEEP"):
        env.pop(name, None)
    return env


def _report_argv(out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "burrow.spark", "--logs", "logs/*.jsonl", "--out", out, *extra]


def _report(cwd: Path, out: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(_report_argv(out, *extra), capture_output=True, text=True, cwd=cwd, env=_env(cwd),
                          timeout=600)


def _kept(cwd: Path, command: str) -> str:
    done = subprocess.run([sys.executable, "-m", "burrow.spark.kept_server", command], capture_output=True,
                          text=True, cwd=cwd, env=_env(cwd), timeout=700)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _pid(status: str) -> int:
    assert status.startswith("kept Spark server: pid "), status
    return int(status.split()[4].rstrip(","))


def _gone(pid: int) -> bool:
    return not alive(pid)


@pytest.fixture
def cwd(tmp_path):
    yield tmp_path
    _kept(tmp_path, "stop")  # never leave a server behind


def _refused_without_token(port: int, cwd: Path) -> str:
    code = ("import sys; from pyspark.sql import SparkSession; "
            "SparkSession.builder.remote(sys.argv[1]).getOrCreate().range(1).count()")
    done = subprocess.run([sys.executable, "-c", code, f"sc://localhost:{port}"], capture_output=True, text=True,
                          env=_env(cwd), timeout=300)
    assert done.returncode != 0, "a client without the token was served"
    return done.stderr


def test_keep_spark_starts_a_server_that_later_runs_use_until_it_stops(cwd):
    gen = generate(str(cwd / "logs"), events=2000, days=2, nodes=2, malformed=2)
    local = _report(cwd, "local", "--master", "local[2]")
    assert local.returncode == 0, local.stderr[-3000:]

    first = _report(cwd, "first", "--keep-spark", "10m", "--master", "local[2]")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "starting a Spark server to keep for later runs" in first.stderr
    assert f"{sum(gen.counts.values()):,} events in the dataset" in first.stderr
    _same_tables(cwd / "local", cwd / "first")
    status = _kept(cwd, "status")
    pid = _pid(status)
    assert "master local[2]" in status and "stops after 600 s unused" in status, status
    info = cwd / "cache" / "burrow" / "kept-spark" / "server.json"
    assert stat.S_IMODE(info.stat().st_mode) == 0o600  # it holds the token
    port = int(status.split("127.0.0.1:")[1].split(",")[0])
    assert "UNAUTHENTICATED" in _refused_without_token(port, cwd)

    # a later run uses the same server and joins the session the first one kept there
    sessions = _kept_sessions(cwd)
    second = _report(cwd, "second", "--keep-spark", "10m")
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"using the kept Spark server (pid {pid}, port {port})" in second.stderr
    assert "other master" in second.stderr  # asked for local[*]: the server keeps what it was started with
    assert _kept_sessions(cwd) == sessions
    _same_tables(cwd / "local", cwd / "second")

    # `stop` lets a report that is using the server finish first
    running = subprocess.Popen(_report_argv("third", "--keep-spark", "10m"), stderr=subprocess.PIPE, text=True,
                               cwd=cwd, env=_env(cwd))
    lines = []
    for line in running.stderr:
        lines.append(line)
        if "using the kept Spark server" in line:
            break
    assert f"(pid {pid}," in "".join(lines), "".join(lines)
    assert _kept(cwd, "stop") == f"stopped the kept Spark server (pid {pid})"
    rest = running.stderr.read()
    assert running.wait(60) == 0, rest[-3000:]
    assert running.poll() == 0 and _gone(pid)
    _same_tables(cwd / "local", cwd / "third")
    assert _kept(cwd, "status") == "no kept Spark server is running"

    # the next run starts a new server, which stops by itself once unused for the time given
    fourth = _report(cwd, "fourth", "--keep-spark", "3s", "--master", "local[2]")
    assert fourth.returncode == 0, fourth.stderr[-3000:]
    assert "starting a Spark server to keep" in fourth.stderr
    _same_tables(cwd / "local", cwd / "fourth")
    log = cwd / "cache" / "burrow" / "kept-spark" / "server.log"
    deadline = time.monotonic() + 120
    while "stopping: unused for" not in log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "stopping: unused for" in log.read_text(errors="replace")
    deadline = time.monotonic() + 90
    while _kept(cwd, "status") != "no kept Spark server is running" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _kept(cwd, "status") == "no kept Spark server is running"
    assert not info.exists()

    # a supervisor killed outright takes its server along
    fifth = _report(cwd, "fifth", "--keep-spark", "10m", "--master", "local[2]")
    assert fifth.returncode == 0, fifth.stderr[-3000:]
    server = json.loads(info.read_text())
    os.kill(server["supervisor"], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not _gone(server["server"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _gone(server["server"])
    assert _kept(cwd, "status") == "no kept Spark server is running"


def test_keep_spark_arguments():
    from burrow.spark.__main__ import parse_args
    from burrow.spark.units import parse_duration

    assert [parse_duration(t) for t in ("90", "90s", "30m", "2h", "1d", "1.5h")] == [90, 90, 1800, 7200, 86400, 5400]
    for bad in ("", "0", "-5m", "2w", "soon"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    args = parse_args(["--logs", "a/*.jsonl", "--out", "y", "--keep-spark", "2h"])
    assert args.keep_spark == 7200 and args.out == os.path.abspath("y")
    assert args.logs == [os.path.abspath("a/*.jsonl")]  # the server's working directory is its own
    for argv in (["--keep-spark", "2h", "--remote", "sc://h:1"], ["--keep-spark", "later"],
                 ["--keep-spark", "2h", "--out", "hdfs://nn/out"]):
        with pytest.raises(SystemExit):
            parse_args(["--logs", "x", "--out", "y", *argv])
