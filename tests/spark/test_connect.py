"""burrow-report on a real Spark Connect server (started from the PySpark wheel on 127.0.0.1): the
client has no JVM, and every table it writes equals local mode's, byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from burrow.spark.generate import generate
from burrow.spark.job import ORDER
from harness.spark_connect import connect_server

# a server JVM and three report runs; the machine may be shared, so the bound is generous
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _report(cwd: Path, logs: str, out: str, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("BURROW_SPARK_REMOTE", None)
    return subprocess.run([sys.executable, "-m", "burrow.spark", "--logs", logs, "--out", out, *extra],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def _same_tables(want: Path, got: Path) -> None:
    for name in ORDER:
        csv_want, csv_got = (want / "tables" / f"{name}.csv").read_bytes(), (got / "tables" / f"{name}.csv").read_bytes()
        assert csv_want.count(b"\n") > 1, f"{name}: local mode wrote no rows"
        assert csv_got == csv_want, f"{name}.csv differs from local mode's"
        rows_want = pq.read_table(want / "tables" / name).to_pylist()
        assert pq.read_table(got / "tables" / name).to_pylist() == rows_want, f"{name} (Parquet) differs"


def test_report_through_spark_connect_equals_local_mode(tmp_path):
    logs = tmp_path / "logs"
    gen = generate(str(logs), events=2000, days=2, nodes=2, malformed=2)
    local = _report(tmp_path, str(logs / "*.jsonl"), str(tmp_path / "local"), "--master", "local[2]")
    assert local.returncode == 0, local.stderr[-3000:]
    with connect_server(tmp_path / "server", master="local[2]") as (url, server):
        # relative paths: the client resolves them, not the server (whose working directory differs)
        remote = _report(tmp_path, "logs/*.jsonl", "remote", "--remote", url)
        assert remote.returncode == 0, remote.stderr[-3000:]
        assert f"connecting to Spark Connect at {url}" in remote.stderr
        assert f"{sum(gen.counts.values()):,} events in the dataset" in remote.stderr
        assert "malformed 2" in remote.stderr
        assert "sessionId" in server.log.read_text(errors="replace"), "the server saw no session"
        _same_tables(tmp_path / "local", tmp_path / "remote")
        manifest = json.loads((tmp_path / "remote" / "_manifest.json").read_text())
        assert manifest["files"] == json.loads((tmp_path / "local" / "_manifest.json").read_text())["files"]
        # the server lists the files as local mode does (same names, sizes and times): over local mode's
        # --out nothing is read again and the tables stay the same
        again = _report(tmp_path, str(logs), str(tmp_path / "local"), "--remote", url)
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"{len(gen.files)} files ({len(gen.files)} unchanged, skipped)" in again.stderr
    _same_tables(tmp_path / "remote", tmp_path / "local")


def test_remote_refuses_a_master_and_a_remote_out():
    from burrow.spark.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--logs", "x", "--out", "y", "--remote", "sc://127.0.0.1:1", "--master", "local[1]"])
    with pytest.raises(SystemExit):
        parse_args(["--logs", "x", "--out", "hdfs://nn/out", "--remote", "sc://127.0.0.1:1"])
    args = parse_args(["--logs", "a/*.jsonl,hdfs://nn/l", "--out", "y", "--remote", "sc://127.0.0.1:1"])
    assert args.logs == [os.path.abspath("a/*.jsonl"), "hdfs://nn/l"] and args.out == os.path.abspath("y")


def test_an_unreachable_server_is_an_error_at_once(tmp_path):
    from harness.ports import free_port

    (tmp_path / "a.jsonl").write_text("{}\n")
    done = _report(tmp_path, "a.jsonl", "out", "--remote", f"sc://127.0.0.1:{free_port()}/;token=SECRET")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "cannot reach the Spark Connect server at 127.0.0.1:" in done.stderr
    assert "SECRET" not in done.stderr
