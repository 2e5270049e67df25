"""Ingest on real files: quarantine, unknown versions, duplicates, incremental re-runs, bad input."""

from __future__ import annotations

import json
import os

import pytest
from pyspark.sql import functions as F

from burrow.spark.ingest import IngestError, ingest

from .conftest import event


def _line(**kw) -> str:
    return json.dumps(kw, separators=(",", ":"))


def _session(started: float, mood: str = "happy", total: int = 10, day: int = 0) -> str:
    started += day * 86400
    return _line(**event("transit", "session", started=started, duration=5.0, waiting_time=1.0, mood=mood,
                         transport="tcp", bytes_from_first=total, bytes_from_second=0, total_bytes=total,
                         node="t1") | {})


def _clean(line: str) -> str:
    """Drop the other event types' null columns, as a server writes them."""
    rec = {k: v for k, v in json.loads(line).items() if v is not None or k == "waiting_time"}
    return json.dumps(rec)


def test_ingest_rejects_dedupes_and_is_incremental(spark, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    out = str(tmp_path / "out")
    good = [_clean(_session(1000.0 + i, total=i)) for i in range(3)] + [_clean(_session(50.0, day=1))]
    bad = ["not json", '{"v":1,"ts":"noon","service":"transit","event":"session","node":"x"}']
    future = _clean(_session(7.0)).replace('"v": 1', '"v": 9')
    missing = json.dumps({"v": 1, "ts": 5.0, "service": "transit", "event": "session", "node": "t1"})
    unknown = json.dumps({"v": 1, "ts": 5.0, "service": "transit", "event": "teleport", "node": "t1"})
    (logs / "transit.jsonl").write_text("\n".join(good[:3] + bad + [future, "", missing, unknown, good[3]]) + "\n")
    (logs / "transit.jsonl.1").write_text(good[0] + "\n" + good[1] + "\n")  # a rotated copy: duplicates

    r = ingest(spark, [str(logs / "*")], out, log=lambda m: None)
    assert (r.files_read, r.lines, r.events_new, r.duplicates) == (2, 11, 4, 2)
    assert r.rejected == {"malformed": 2, "unknown_version": 1, "missing_field": 1, "unknown_event": 1}
    assert r.unknown_versions == {9: 1}
    assert r.days == ["1970-01-01", "1970-01-02"]
    events = spark.read.parquet(f"{out}/events")
    assert sorted(x["total_bytes"] for x in events.collect()) == [0, 1, 2, 10]
    assert sorted(d for d in os.listdir(f"{out}/events") if d.startswith("day=")) == [
        "day=1970-01-01", "day=1970-01-02"]
    q = spark.read.parquet(f"{out}/quarantine")
    assert q.count() == 5 and q.where(F.col("line") == "not json").count() == 1

    # unchanged input: nothing is read again
    r2 = ingest(spark, [str(logs / "*")], out, log=lambda m: None)
    assert (r2.files_skipped, r2.files_read, r2.lines) == (2, 0, 0)

    # the log grows: only the new event is stored; old lines are not stored or quarantined twice
    with open(logs / "transit.jsonl", "a") as fh:
        fh.write(_clean(_session(2000.0, mood="lonely", total=0)) + "\n")
    r3 = ingest(spark, [str(logs / "*")], out, log=lambda m: None)
    assert (r3.files_read, r3.events_new, r3.duplicates) == (1, 1, 4)
    assert spark.read.parquet(f"{out}/events").count() == 5
    assert spark.read.parquet(f"{out}/quarantine").count() == 5
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["days"] == {"1970-01-01": 4, "1970-01-02": 1} and len(manifest["runs"]) == 2


def test_bad_input_is_refused_with_a_clear_message(spark, tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(IngestError, match="no log files match"):
        ingest(spark, [str(tmp_path / "nothing-*.jsonl")], out)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(IngestError, match="empty"):
        ingest(spark, [str(tmp_path / "empty.jsonl")], out)
    (tmp_path / "junk.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n binary junk\nmore junk\n")
    with pytest.raises(IngestError, match="junk.jsonl is not an event log: all 4 lines are malformed"):
        ingest(spark, [str(tmp_path / "junk.jsonl")], out)
    (tmp_path / "future.jsonl").write_text(_clean(_session(1.0)).replace('"v": 1', '"v": 2') + "\n")
    with pytest.raises(IngestError, match="no events in .*unknown schema versions: v=2"):
        ingest(spark, [str(tmp_path / "future.jsonl")], out)


def test_all_files_share_one_scan_and_keep_their_names(spark, tmp_path):
    """Every file is read by one scan (no per-file copy of the plan); each line's source is its file as
    listed, even for names that a URI escapes (space, %, +), in the counts and in the quarantine."""
    from burrow.spark import fs
    from burrow.spark.ingest import read_raw

    logs = tmp_path / "logs dir"
    logs.mkdir()
    names = ["a b.jsonl", "100%.jsonl", "c+d.jsonl"] + [f"rotated-{i:02d}.jsonl" for i in range(9)]
    for i, name in enumerate(names):
        lines = [_clean(_session(100.0 * i + j, total=j)) for j in range(i + 1)]
        (logs / name).write_text("\n".join(lines + (["not json"] if i < 3 else [])) + "\n")
    r = ingest(spark, [str(logs / "*.jsonl")], str(tmp_path / "out"), log=lambda m: None)
    listed = {f.uri: os.path.basename(fs.local_path(f.uri)) for f in fs.list_inputs(spark, [str(logs / "*.jsonl")])[0]}
    assert sorted(r.per_file) == sorted(listed)
    by_name = {listed[uri]: (s["lines"], s["valid"]) for uri, s in r.per_file.items()}
    assert by_name == {name: (i + 1 + (i < 3), i + 1) for i, name in enumerate(names)}
    assert (r.events_new, r.rejected) == (sum(range(1, 13)), {"malformed": 3})
    q = spark.read.parquet(str(tmp_path / "out" / "quarantine")).collect()
    assert sorted(fs.norm_uri(x["file"]) for x in q) == sorted(u for u, n in listed.items() if n in names[:3])

    plan = read_raw(spark, sorted(listed))._jdf.queryExecution().executedPlan().toString()
    assert plan.count("FileScan json") == 1 and "Union" not in plan
