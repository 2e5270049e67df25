"""The whole report: ingest, the transforms, and writing Parquet + CSV tables and report.html.

Layout of --out:
    events/day=YYYY-MM-DD/     the ingested events (Parquet), appended run after run
    quarantine/                rejected lines with file, reason and version (Parquet)
    _manifest.json             files and days already ingested
    tables/<name>/ + tables/<name>.csv   each result table as Parquet and as one CSV file
    report.html                the self-contained report
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import time
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from . import capacity, fs, load, report, sessions
from .capacity import CapacityConfig
from .ingest import IngestError, IngestResult, ingest


@dataclass
class ReportResult:
    ingest: IngestResult
    events: int = 0
    tables: dict[str, str] = field(default_factory=dict)
    html: str = ""
    seconds: dict[str, float] = field(default_factory=dict)


def build_tables(events: DataFrame, cfg: CapacityConfig, held: list[DataFrame] | None = None,
                 rate_window: int = 1) -> dict[str, DataFrame]:
    """Every result table from the events dataset (lazy). Intermediate results that several tables
    share are persisted and appended to `held` for the caller to unpersist. `rate_window`: the slot
    (seconds) of the peak byte rate, see `load.rate_window`."""
    held = [] if held is None else held
    per_minute = load.load_per_minute(events, held, rate_window).persist(StorageLevel.MEMORY_AND_DISK)
    daily = load.daily_peaks(per_minute).persist(StorageLevel.MEMORY_AND_DISK)
    facts = sessions.session_facts(events)
    # two passes over the sessions serve the four session tables (both results are small)
    cube = sessions.session_cube(facts).persist(StorageLevel.MEMORY_AND_DISK)
    stats = sessions.group_stats(facts).persist(StorageLevel.MEMORY_AND_DISK)
    plan = capacity.plan(daily, cfg).persist(StorageLevel.MEMORY_AND_DISK)
    held += [per_minute, daily, cube, stats, plan]
    return {
        "load_minute": per_minute,
        "load_hour": load.load_per_hour(per_minute),
        "daily_peaks": daily,
        "session_outcomes": sessions.outcomes_of(cube),
        "session_summary": sessions.summary_of(stats),
        "session_distributions": sessions.distributions_of(cube),
        "session_daily": sessions.daily_of(stats),
        "capacity_plan": plan,
        "capacity_by_service": capacity.plan_by_service(plan),
        "capacity_forecast": capacity.forecast(daily, cfg),
    }


# Sort order of each written table (they are small enough for one file each).
ORDER = {"load_minute": ["service", "minute"], "load_hour": ["service", "hour"], "daily_peaks": ["service", "day"],
         "session_outcomes": ["service", "kind", "app_id", "outcome"], "session_summary": ["service", "kind", "app_id"],
         "session_distributions": ["service", "kind", "app_id", "metric", "bucket"],
         "session_daily": ["service", "kind", "app_id", "day"], "capacity_plan": ["service", "resource"],
         "capacity_by_service": ["service"], "capacity_forecast": ["service", "resource", "day"]}
# Tables that can grow with the input (a row per minute): Spark writes their CSV; the rest are collected.
SPARK_CSV = {"load_minute"}
# Tables the HTML report draws from (all small: hours, days, groups).
REPORT_TABLES = {"load_hour": "load_hour", "session_outcomes": "outcomes", "session_summary": "summary",
                 "session_distributions": "distributions", "capacity_plan": "plan",
                 "capacity_by_service": "plan_by_service", "capacity_forecast": "forecast"}


def run_report(spark: SparkSession, logs: list[str], out: str, cfg: CapacityConfig, log=print) -> ReportResult:
    out = out.rstrip("/")
    t0 = time.monotonic()
    res = ReportResult(ingest=ingest(spark, logs, out, log=log))
    log(f"ingest: {res.ingest.summary()}")
    res.seconds["ingest"] = time.monotonic() - t0
    events = spark.read.parquet(f"{out}/events")
    resolution = load.time_resolution(events)  # one small job: how finely the logs place sessions in time
    window = load.rate_window(resolution)
    collected = write_tables(spark, events, out, cfg, res, window)
    collected["daily"] = collected.pop("daily_peaks")
    days = _manifest_days(spark, out)
    res.events = sum(n for n in days.values())
    meta = {"generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "logs": logs,
            "events": res.events, "days": sorted(d for d, n in days.items() if n),
            "ingest": res.ingest.summary(), "rejected": res.ingest.rejected,
            "unknown_versions": res.ingest.unknown_versions, "assumptions": cfg.assumptions(),
            "time_resolution": resolution, "rate_window": window}
    html = report.render({"meta": meta, **collected})
    res.html = f"{out}/report.html"
    if "://" in out or out.startswith(("file:", "hdfs:", "s3a:", "gs:", "abfs:")):
        fs.write_text(spark, res.html, html)
    else:
        os.makedirs(out, exist_ok=True)
        with open(res.html, "w", encoding="utf-8") as fh:
            fh.write(html)
    res.seconds["total"] = time.monotonic() - t0
    return res


def write_tables(spark: SparkSession, events: DataFrame, out: str, cfg: CapacityConfig,
                 res: ReportResult, rate_window: int = 1) -> dict[str, list[dict]]:
    """Every table to Parquet + CSV; returns the rows of the report's tables (and daily_peaks)."""
    held: list[DataFrame] = []
    tables = build_tables(events, cfg, held, rate_window)
    collected: dict[str, list[dict]] = {}
    try:
        for name, df in tables.items():
            t = time.monotonic()
            df = df.persist(StorageLevel.MEMORY_AND_DISK)
            held.append(df)
            df = df.coalesce(1).sortWithinPartitions(*ORDER[name])
            path = f"{out}/tables/{name}"
            df.write.mode("overwrite").parquet(path)
            if name in SPARK_CSV:
                df.write.mode("overwrite").option("header", True).csv(path + ".csv.parts")
                fs.single_file(spark, path + ".csv.parts", ".csv", path + ".csv")
            else:  # small: one collect serves the CSV and the report
                rows = [r.asDict() for r in df.collect()]
                fs.write_text(spark, path + ".csv", to_csv(df.columns, rows))
                if name in REPORT_TABLES or name == "daily_peaks":
                    collected[REPORT_TABLES.get(name, name)] = rows
            res.tables[name] = path
            res.seconds[name] = time.monotonic() - t
    finally:
        for df in held:
            df.unpersist()
    return collected


def to_csv(columns: list[str], rows: list[dict]) -> str:
    """CSV as Spark writes it: ISO times in UTC, empty for null."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if r[c] is None else r[c].isoformat() if isinstance(r[c], dt.date) else r[c] for c in columns])
    return buf.getvalue()


def _manifest_days(spark: SparkSession, out: str) -> dict[str, int]:
    from .ingest import load_manifest

    return load_manifest(spark, out)["days"]


__all__ = ["IngestError", "ReportResult", "build_tables", "run_report"]
