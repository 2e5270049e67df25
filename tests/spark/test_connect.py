"""burrow-report on a real Spark Connect server (started from the PySpark wheel on 127.0.0.1): the
client has no JVM, every table it writes equals local mode's, byte for byte, and later reports join the
session the first one left on the server, with the code Spark generated for it."""

from __future__ import annotations

import json
import os
import shutil
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
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", XDG_CACHE_HOME=str(cwd / "cache"))
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


def _kept_sessions(cwd: Path) -> dict[str, str]:
    return json.loads((cwd / "cache" / "burrow" / "spark-connect-sessions.json").read_text())


def _release(url: str, session_id: str) -> None:
    """Close a session on the server, as its idle timeout would, from a client of its own."""
    code = ("import sys; from pyspark.sql import SparkSession; "
            "s = SparkSession.builder.remote(sys.argv[1]).getOrCreate(); s.range(1).count(); s.stop()")
    subprocess.run([sys.executable, "-c", code, f"{url}/;session_id={session_id}"], check=True, timeout=300,
                   capture_output=True)


def test_report_through_spark_connect_equals_local_mode(tmp_path):
    logs = tmp_path / "logs"
    gen = generate(str(logs), events=2000, days=2, nodes=2, malformed=2)
    local = _report(tmp_path, str(logs / "*.jsonl"), str(tmp_path / "local"), "--master", "local[2]")
    assert local.returncode == 0, local.stderr[-3000:]
    with connect_server(tmp_path / "server", master="local[2]") as (url, server):
        # relative paths: the client resolves them, not the server (whose working directory differs)
        remote = _report(tmp_path, "logs/*.jsonl", "remote", "--remote", url)
        assert remote.returncode == 0, remote.stderr[-3000:]
        first_codegen = server.log.read_text(errors="replace").count("Code generated in")
        assert f"connecting to Spark Connect at {url}" in remote.stderr
        assert f"{sum(gen.counts.values()):,} events in the dataset" in remote.stderr
        assert "malformed 2" in remote.stderr
        assert "sessionId" in server.log.read_text(errors="replace"), "the server saw no session"
        _same_tables(tmp_path / "local", tmp_path / "remote")
        manifest = json.loads((tmp_path / "remote" / "_manifest.json").read_text())
        assert manifest["files"] == json.loads((tmp_path / "local" / "_manifest.json").read_text())["files"]

        # the run's session stays on the server. The same report again joins it: it reuses the classes
        # Spark generated for the first run instead of generating them again, and, writing where the first
        # did (emptied), is not given the first run's plans, which list files now gone.
        kept = _kept_sessions(tmp_path)
        assert len(kept) == 1, kept
        session_id = next(iter(kept.values()))
        log = server.log.read_text(errors="replace")
        assert session_id in log
        shutil.rmtree(tmp_path / "remote")
        second = _report(tmp_path, "logs/*.jsonl", "remote", "--remote", url)
        assert second.returncode == 0, second.stderr[-3000:]
        second_codegen = server.log.read_text(errors="replace")[len(log):].count("Code generated in")
        assert first_codegen > 50 and second_codegen < first_codegen / 4, (first_codegen, second_codegen)
        assert _kept_sessions(tmp_path) == kept
        _same_tables(tmp_path / "local", tmp_path / "remote")

        # the server lists the files as local mode does (same names, sizes and times): over local mode's
        # --out nothing is read again and the tables stay the same
        again = _report(tmp_path, str(logs), str(tmp_path / "local"), "--remote", url)
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"{len(gen.files)} files ({len(gen.files)} unchanged, skipped)" in again.stderr
        assert _kept_sessions(tmp_path) == kept

        # a session the server has closed (idle too long) is replaced by a new one, kept in its place
        _release(url, session_id)
        fourth = _report(tmp_path, "logs", "remote-new-session", "--remote", url)
        assert fourth.returncode == 0, fourth.stderr[-3000:]
        assert "the server has closed the kept session" in fourth.stderr
        renewed = _kept_sessions(tmp_path)
        assert list(renewed) == list(kept) and renewed != kept, renewed
        _same_tables(tmp_path / "local", tmp_path / "remote-new-session")
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


def test_the_kept_session_is_per_server_user_and_settings(tmp_path, monkeypatch):
    from burrow.spark import connect

    url = connect.with_session("sc://127.0.0.1:15002/;token=SECRET;user_id=ops", "A")
    assert url == "sc://127.0.0.1:15002/;token=SECRET;user_id=ops;session_id=A"
    assert connect.with_session("sc://h:1", "B") == "sc://h:1/;session_id=B"
    assert connect.url_params(url) == {"token": "SECRET", "user_id": "ops", "session_id": "A"}
    key = connect.session_key("sc://h:1/;token=x", {"a": "1"})
    assert key == connect.session_key("sc://h:1", {"a": "1"})  # the token is not part of it
    assert len({key, connect.session_key("sc://h:2", {"a": "1"}), connect.session_key("sc://h:1", {"a": "2"}),
                connect.session_key("sc://h:1/;user_id=u", {"a": "1"})}) == 4

    # the file keeps the most recently used sessions, a bounded number of them
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = connect.sessions_file()
    assert path == tmp_path / "burrow" / "spark-connect-sessions.json"
    assert connect._save(path, {f"k{i}": f"s{i}" for i in range(connect.MAX_SESSIONS + 5)})
    kept = connect._load(path)
    assert len(kept) == connect.MAX_SESSIONS and "k0" not in kept and f"k{connect.MAX_SESSIONS + 4}" in kept
    path.write_text("not json")
    assert connect._load(path) == {}
