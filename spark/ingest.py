"""Ingest: JSON-lines event logs -> a Parquet dataset partitioned by day, incrementally.

extract:   `list_inputs` (any Hadoop URI or glob) and `read_raw` of new or changed files only (Spark's
           JSON reader with the explicit `LINE_SCHEMA`, nothing inferred).
transform: `classify` (a rejection reason per line, a line id, the day), `quarantined`,
           `duplicate_ids`, `drop_duplicates`.
load:      the input is parsed exactly once, into a staging Parquet dataset partitioned by (valid, day);
           everything else reads that columnar copy. In the usual case (no duplicates) the valid files
           are then *moved* into `<out>/events/day=...`, so nothing is rewritten; rejected lines go to
           `<out>/quarantine`; the files and days are recorded in `<out>/_manifest.json`.

Incremental: a file whose size and modification time match the manifest is not read again. A file
that grew is read again, and only its lines not already stored for their day are appended (an
anti-join on the line id against just those days), so days already ingested are never rewritten.
Duplicates: an identical event (same `_id`, a 64-bit hash of every field, and the same ts/node/event)
is one event, whether it appears twice in one run (a copied or rotated file) or across runs.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from burrow.common.events import SCHEMAS

from . import fs
from .schemas import KNOWN_VERSIONS, LINE_SCHEMA, UNION_FIELDS, required_fields

CORRUPT = "_corrupt"
MAX_QUARANTINE_LINE = 4096  # characters of a rejected line kept for a person to look at
DEDUPE_KEY = ["day", "_id", "ts", "node", "service", "event"]
EVENT_COLUMNS = [f.name for f in UNION_FIELDS] + ["_id", "day"]
MAX_BROADCAST_DUPLICATES = 200_000  # more suspects than this: de-duplicate with a full shuffle
# Times, durations and sizes are nearly all distinct: Parquet's dictionary for them is built, overflows
# and is thrown away in every row group (~10 % of the write). Plain encoding, same file size.
WRITE_OPTIONS = {f"parquet.enable.dictionary#{f.name}": "false"
                 for f in UNION_FIELDS if f.kind in ("int", "float") and f.name != "v"} | {
                     "parquet.enable.dictionary#_id": "false"}


class IngestError(Exception):
    """Input a person must fix: nothing matched, nothing readable, a malformed file."""


@dataclass
class IngestResult:
    files_seen: int = 0
    files_skipped: int = 0  # unchanged since the last run
    files_read: int = 0
    lines: int = 0
    events_new: int = 0
    duplicates: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> lines
    unknown_versions: dict[int, int] = field(default_factory=dict)
    days: list[str] = field(default_factory=list)  # days that received new events
    per_file: dict[str, dict[str, int]] = field(default_factory=dict)

    def summary(self) -> str:
        parts = [f"{self.files_seen} files ({self.files_skipped} unchanged, skipped)",
                 f"{self.lines} lines read", f"{self.events_new} new events", f"{self.duplicates} duplicates dropped"]
        if self.rejected:
            parts.append("rejected: " + ", ".join(f"{k} {v}" for k, v in sorted(self.rejected.items())))
        if self.unknown_versions:
            parts.append("unknown schema versions: " + ", ".join(
                f"v={k} ({n} lines)" for k, n in sorted(self.unknown_versions.items())))
        return "; ".join(parts)


# ---------------------------------------------------------------- transforms (pure)

def _valid_type(service: Column, event: Column) -> Column:
    cond = F.lit(False)
    for svc, ev in SCHEMAS:
        cond = cond | ((service == svc) & (event == ev))
    return cond


def _missing_required() -> Column:
    """True when a non-nullable field of the line's own type is null."""
    expr = F.lit(False)
    for svc, ev in SCHEMAS:
        missing = F.lit(False)
        for name in required_fields(svc, ev):
            missing = missing | F.col(name).isNull()
        expr = F.when((F.col("service") == svc) & (F.col("event") == ev), missing).otherwise(expr)
    return expr


def read_raw(spark: SparkSession, uris: list[str]) -> DataFrame:
    """Extract: the JSON-lines files parsed with the explicit LINE_SCHEMA (plus the corrupt-record
    column and `_file`, the source). Spark's JSON reader is the fastest parser here; nothing is inferred.

    One scan for every file, each row's source taken from the scan's own `_metadata.file_path` (set once
    per file, URL-encoded: see `fs.source_uri`). A scan per file, tagged with its name as a constant,
    puts a copy of every later step per file into one generated class: 48 files cost 1.6x the CPU of
    the same lines in 6."""
    schema = StructType([*LINE_SCHEMA.fields, StructField(CORRUPT, StringType(), True)])
    reader = spark.read.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
    return reader.json(uris).withColumn("_file", F.col("_metadata.file_path"))


def classify(raw: DataFrame) -> DataFrame:
    """Parsed lines -> the LINE_SCHEMA columns + _file, _corrupt (the text of a line that did not
    parse), _id, day and _reason.

    `_reason` is null for a valid event, else `malformed` (not a JSON object, or a field of the wrong
    kind), `unknown_version`, `unknown_event` or `missing_field`. `_id` hashes every scalar field.
    """
    names = [f.name for f in UNION_FIELDS]
    scalars = [f.name for f in UNION_FIELDS if f.kind != "counts"]
    reason = (F.when(F.col("v").isNotNull() & ~F.col("v").isin(*KNOWN_VERSIONS), "unknown_version")
              .when(F.col(CORRUPT).isNotNull() | F.col("v").isNull(), "malformed")
              .when(~_valid_type(F.col("service"), F.col("event")), "unknown_event")
              .when(_missing_required(), "missing_field"))
    return raw.select(
        *names, "_file", CORRUPT,
        reason.alias("_reason"),
        F.xxhash64(*scalars).alias("_id"),
        F.to_date(F.timestamp_seconds("ts")).alias("day"))


def quarantined(parsed: DataFrame, run_id: str) -> DataFrame:
    """Rejected lines (with `_line` from `_line_text`) as the quarantine's rows."""
    # the file as listed: decode the scan's percent-escapes (a literal "+" stays itself)
    file = F.url_decode(F.replace(F.col("_file"), F.lit("+"), F.lit("%2B")))
    return (parsed.where(F.col("_reason").isNotNull())
            .select(file.alias("file"), F.col("_reason").alias("reason"),
                    F.col("v").alias("version"), F.col("_line").alias("line"),
                    F.xxhash64(file, "_line").alias("_id"), F.lit(run_id).alias("run")))


def duplicate_ids(events: DataFrame) -> DataFrame:
    """Ids seen more than once: a shuffle of 8-byte keys only, so the common no-duplicate case never
    shuffles whole rows."""
    return events.groupBy("_id").count().where(F.col("count") > 1).select("_id")


def drop_duplicates(events: DataFrame, existing_ids: DataFrame | None = None,
                    suspects: DataFrame | None = None) -> DataFrame:
    """Keep one row per identical event; drop events whose id is already stored for that day.

    With `suspects` (the output of `duplicate_ids`), only rows with those ids go through the
    de-duplicating shuffle; the rest pass straight through."""
    if suspects is None:
        out = events.dropDuplicates(DEDUPE_KEY)
    elif suspects.isEmpty():
        out = events
    else:
        marked = events.join(F.broadcast(suspects.withColumn("_dup", F.lit(True))), "_id", "left")
        out = (marked.where(F.col("_dup").isNull()).drop("_dup")
               .unionByName(marked.where(F.col("_dup")).drop("_dup").dropDuplicates(DEDUPE_KEY)))
    if existing_ids is not None:
        out = out.join(existing_ids.select(*DEDUPE_KEY), on=DEDUPE_KEY, how="left_anti")
    return out


# ---------------------------------------------------------------- manifest

def load_manifest(spark: SparkSession, out: str) -> dict:
    text = fs.read_text(spark, f"{out}/_manifest.json")
    if text is None:
        return {"version": 1, "files": {}, "days": {}, "runs": []}
    return json.loads(text)


def save_manifest(spark: SparkSession, out: str, manifest: dict) -> None:
    fs.write_text(spark, f"{out}/_manifest.json", json.dumps(manifest, indent=1, sort_keys=True))


# ---------------------------------------------------------------- the job

def ingest(spark: SparkSession, patterns: list[str], out: str, log=print) -> IngestResult:
    """Bring every new or changed input file into `<out>/events`; raise IngestError on bad input."""
    files, unmatched = fs.list_inputs(spark, patterns)
    if not files:
        raise IngestError(f"no log files match {', '.join(patterns)}")
    for pattern in unmatched:
        log(f"warning: {pattern} matched no files")
    manifest = load_manifest(spark, out)
    known = manifest["files"]
    todo = [f for f in files if known.get(f.uri, {}).get("size") != f.size
            or known.get(f.uri, {}).get("mtime") != f.mtime]
    result = IngestResult(files_seen=len(files), files_skipped=len(files) - len(todo), files_read=len(todo))
    nonempty = [f for f in todo if f.size > 0]
    if not nonempty:
        if not manifest["days"]:
            raise IngestError(f"the input files are empty: {', '.join(f.uri for f in files[:5])}")
        log("no new input since the last run")
        return result

    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    staging = f"{out}/_staging/{run_id}"
    events_dir = f"{out}/events"
    try:
        # the one pass over the input text
        (classify(read_raw(spark, [f.uri for f in nonempty]))
         .withColumn("_line", F.when(F.col("_reason").isNotNull(), _line_text()))
         .withColumn("_run", F.lit(run_id)).withColumn("_ok", F.col("_reason").isNull()).drop(CORRUPT)
         .write.options(**WRITE_OPTIONS).partitionBy("_ok", "day").parquet(staging))
        staged = spark.read.parquet(staging)
        _count(staged, result)
        _check_files(result, nonempty)
        if result.rejected:
            _quarantine(spark, out, quarantined(staged.where(F.col("_ok") == "false"), run_id))
        per_day = {d: n for f in result.per_file.values() for d, n in f["_per_day"].items()}
        per_day = {d: sum(f["_per_day"].get(d, 0) for f in result.per_file.values()) for d in per_day}
        if per_day:
            per_day = _store(spark, staging, events_dir, staged.where(F.col("_ok") == "true").drop("_ok"),
                             [d for d in per_day if d in manifest["days"]], per_day, run_id)
    finally:
        fs.delete(spark, f"{out}/_staging")  # one run per --out at a time (see docs/spark.md)
    return _finish(spark, out, manifest, result, todo, run_id, per_day, patterns)


def _line_text() -> Column:
    """A rejected line as text: as read if it was not JSON, else re-encoded from its fields."""
    names = [f.name for f in UNION_FIELDS]
    return F.substring(F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*names))), 1, MAX_QUARANTINE_LINE)


def _quarantine(spark: SparkSession, out: str, rejected: DataFrame) -> None:
    quarantine_dir = f"{out}/quarantine"
    if fs.exists(spark, quarantine_dir):  # a grown file is read again: keep each rejected line once
        rejected = rejected.join(spark.read.parquet(quarantine_dir).select("_id"), "_id", "left_anti")
    rejected.write.mode("append").parquet(quarantine_dir)


def _store(spark: SparkSession, staging: str, events_dir: str, valid: DataFrame, stored_days: list[str],
           per_day: dict[str, int], run_id: str) -> dict[str, int]:
    """Put the staged valid events into the dataset; returns the events stored per day."""
    # the ids seen twice stay in the JVM (cached, then broadcast): no Python workers, nothing collected
    suspects = duplicate_ids(valid).persist()
    try:
        n_suspects = suspects.count()
        existing = None
        if stored_days and fs.exists(spark, events_dir):
            existing = spark.read.parquet(events_dir).where(F.col("day").isin(stored_days)).select(*DEDUPE_KEY)
            overlap = valid.where(F.col("day").isin(stored_days)).select(*DEDUPE_KEY).join(existing, DEDUPE_KEY)
            if overlap.isEmpty():
                existing = None
        if not n_suspects and existing is None:
            fs.move_partitions(spark, f"{staging}/_ok=true", events_dir)
            return per_day
        if n_suspects > MAX_BROADCAST_DUPLICATES:
            fresh = drop_duplicates(valid, existing)
        else:
            fresh = drop_duplicates(valid, existing, suspects)
        fresh.write.options(**WRITE_OPTIONS).mode("append").partitionBy("day").parquet(events_dir)
    finally:
        suspects.unpersist()
    return {str(r["day"]): r["count"] for r in spark.read.parquet(events_dir)
            .where(F.col("_run") == run_id).groupBy("day").count().collect()}


def _finish(spark: SparkSession, out: str, manifest: dict, result: IngestResult, todo: list[fs.InputFile],
            run_id: str, per_day: dict[str, int], patterns: list[str]) -> IngestResult:
    known = manifest["files"]
    if not per_day and not manifest["days"]:
        raise IngestError(f"no events in {', '.join(patterns)}: {result.lines} lines read, none a valid event"
                          + (f" ({result.summary()})" if result.lines else ""))
    valid_read = sum(f["valid"] for f in result.per_file.values())
    result.events_new = sum(per_day.values())
    result.duplicates = valid_read - result.events_new
    result.days = sorted(per_day)
    for day, n in per_day.items():
        manifest["days"][day] = manifest["days"].get(day, 0) + n
    for f in todo:
        stats = result.per_file.get(f.uri, {})
        known[f.uri] = {"size": f.size, "mtime": f.mtime, "lines": stats.get("lines", 0),
                        "valid": stats.get("valid", 0), "days": sorted(stats.get("_per_day", {}))}
    manifest["runs"].append({"run": run_id, "files": len(todo), "lines": result.lines,
                             "events": result.events_new, "duplicates": result.duplicates,
                             "rejected": result.rejected})
    save_manifest(spark, out, manifest)
    return result


def _count(parsed: DataFrame, result: IngestResult) -> None:
    """One pass over the parsed lines: per file, per reason (and version, and day for valid ones)."""
    rows = (parsed.groupBy("_file", "_reason",
                           F.when(F.col("_reason") == "unknown_version", F.col("v")).alias("bad_v"),
                           F.when(F.col("_reason").isNull(), F.col("day")).alias("vday"))
            .count().collect())
    reasons: Counter[str] = Counter()
    versions: Counter[int] = Counter()
    for r in rows:
        stats = result.per_file.setdefault(fs.source_uri(r["_file"]), {"lines": 0, "valid": 0, "_per_day": {}})
        stats["lines"] += r["count"]
        result.lines += r["count"]
        if r["_reason"] is None:
            stats["valid"] += r["count"]
            day = str(r["vday"])
            stats["_per_day"][day] = stats["_per_day"].get(day, 0) + r["count"]
        else:
            stats[r["_reason"]] = stats.get(r["_reason"], 0) + r["count"]
            reasons[r["_reason"]] += r["count"]
            if r["bad_v"] is not None:
                versions[int(r["bad_v"])] += r["count"]
    result.rejected = dict(reasons)
    result.unknown_versions = dict(versions)


def _check_files(result: IngestResult, files: list[fs.InputFile]) -> None:
    for f in files:
        stats = result.per_file.get(f.uri)
        if stats and stats["lines"] and stats.get("malformed", 0) == stats["lines"]:
            raise IngestError(f"{f.uri} is not an event log: all {stats['lines']} lines are malformed "
                              "(not JSON objects of docs/events.md); remove it from --logs")
