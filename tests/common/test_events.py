import json
import re
from pathlib import Path

import pytest

from burrow.common.events import ENVELOPE, SCHEMAS, EventLog, EventSchemaError, blur_size, blur_time

DOC = Path(__file__).resolve().parents[2] / "docs" / "events.md"


def _doc_tables() -> dict[str, list[tuple[str, str, str, str]]]:
    """Parse docs/events.md into {section: [(field, kind, nullable, blur)]}."""
    tables: dict[str, list] = {}
    section = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            tables[section] = []
        m = re.match(r"\| `(\w+)` \| (\w+) \| (yes|no) \| (\w*) \|", line)
        if m and section:
            tables[section].append(m.groups())
    return tables


def test_docs_match_code_schema():
    tables = _doc_tables()
    assert [(f.name, f.kind, "yes" if f.nullable else "no", f.blur or "") for f in ENVELOPE] == \
        tables["Envelope (every line)"]
    for (svc, ev), fields in SCHEMAS.items():
        expected = [(f.name, f.kind, "yes" if f.nullable else "no", f.blur or "") for f in fields]
        assert tables[f"`{svc}` / `{ev}`"] == expected, (svc, ev)


def _transit_fields(**over):
    fields = dict(started=1000.5, duration=3.25, waiting_time=0.5, mood="happy", transport="tcp",
                  bytes_from_first=12345, bytes_from_second=7, total_bytes=12352)
    fields.update(over)
    return fields


def test_event_log_writes_one_json_line_per_event(tmp_path):
    path = tmp_path / "logs" / "transit.jsonl"
    log = EventLog(str(path), "transit", node="n1", clock=lambda: 2000.0)
    log.emit("session", **_transit_fields())
    log.emit("session", **_transit_fields(mood="lonely", waiting_time=None))
    log.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first == {"v": 1, "ts": 2000.0, "service": "transit", "event": "session", "node": "n1",
                     **_transit_fields()}
    assert json.loads(lines[1])["waiting_time"] is None


def test_blur_rounds_times_down_and_sizes_up(tmp_path):
    log = EventLog(None, "transit", node="n", blur=60, clock=lambda: 2000.0)
    record = log.emit("session", **_transit_fields())
    assert record["ts"] == 1980.0
    assert record["started"] == 960.0
    assert record["duration"] == 3.25  # durations are not blurred
    assert record["bytes_from_first"] == 20000
    assert record["bytes_from_second"] == 10000
    assert blur_size(0) == 0
    assert blur_size(1_500_000) == 2_000_000
    assert blur_size(1_550_000_000) == 1_600_000_000
    assert blur_time(119.9, 60) == 60.0


@pytest.mark.parametrize("bad", [
    {"extra": 1},
    {"mood": None},
    {"total_bytes": "12"},
    {"total_bytes": True},
])
def test_event_log_rejects_events_outside_the_schema(bad):
    log = EventLog(None, "transit", node="n")
    with pytest.raises(EventSchemaError):
        log.emit("session", **_transit_fields(**bad))
    with pytest.raises(EventSchemaError):
        log.emit("nope")


def test_every_schema_has_session_span_or_interval():
    for (svc, ev), fields in SCHEMAS.items():
        names = {f.name for f in fields}
        assert ("started" in names and "duration" in names) or "interval" in names, (svc, ev)
