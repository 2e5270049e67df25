"""report.html for a planner, built by the real job from three inputs and checked as text and in
headless Chromium: one day of synthetic traffic with a known burst, 30 days with a capacity file,
and logs with no session at all (only stats lines)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from burrow.spark.capacity import load_capacity
from burrow.spark.generate import generate
from burrow.spark.job import run_report
from burrow.spark.units import si

from .test_load import _brute_force_peaks
from .test_report import screenshot

pytestmark = pytest.mark.slow

START = 1_767_225_600.0  # 2026-01-01 00:00 UTC, the generator's first day
BURST_AT = START + 15 * 3600 + 600.0  # 15:10: 4 GB relayed in the 4 s after the second side arrives
BURST = {"v": 1, "ts": BURST_AT + 10, "service": "transit", "event": "session", "node": "node-0",
         "started": BURST_AT, "duration": 10.0, "waiting_time": 6.0, "mood": "happy", "transport": "tcp",
         "bytes_from_first": 4 * 10**9, "bytes_from_second": 0, "total_bytes": 4 * 10**9}


class _Tables(HTMLParser):
    """Every <table> as (header tooltips, header labels, rows of cell texts with colspans expanded)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self._cell: list[str] | None = None
        self._span = 1

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"raw": [], "labels": [], "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell, self._span = [], int(a.get("colspan", 1))
            if tag == "th":
                self.tables[-1]["raw"].append(a.get("title", ""))

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1]["rows"][-1].extend(["".join(self._cell)] * self._span)
            self._cell = None


def tables_of(html: str) -> list[dict]:
    p = _Tables()
    p.feed(html)
    for t in p.tables:
        t["labels"], t["rows"] = t["rows"][0], t["rows"][1:]
    return p.tables


def cell(html: str, raw_column: str, **match: str) -> str:
    """The text of `table.column` in the row whose cells under the other raw columns match."""
    for t in tables_of(html):
        if raw_column in t["raw"]:
            want = {t["raw"].index(k): v for k, v in match.items()}
            for row in t["rows"]:
                if all(row[i] == v for i, v in want.items()):
                    return row[t["raw"].index(raw_column)]
    raise AssertionError(f"no {raw_column} cell for {match}")


@pytest.fixture(scope="module")
def pages(spark, tmp_path_factory):
    """name -> (out dir, html). The three runs share the test session's Spark."""
    base = tmp_path_factory.mktemp("pages")
    inputs = {}
    one = base / "one-logs"
    generate(str(one), events=5000, days=1, nodes=1)
    (one / "burst.jsonl").write_text(json.dumps(BURST) + "\n")
    inputs["one"] = (one, None)
    thirty = base / "thirty-logs"
    generate(str(thirty), events=30000, days=30, nodes=1, growth=0.03)
    cap = base / "capacity.toml"
    cap.write_text("[transit]\nsessions = 8\n")  # small enough that transit fills within the horizon
    inputs["thirty"] = (thirty, str(cap))
    empty = base / "empty-logs"
    generate(str(empty), events=0, days=1, nodes=1)  # servers up, no client yet: stats lines only
    inputs["empty"] = (empty, None)
    out = {}
    for name, (logs, cap_file) in inputs.items():
        dest = base / f"{name}-out"
        run_report(spark, [str(logs / "*.jsonl")], str(dest), load_capacity(cap_file), log=lambda _m: None)
        out[name] = (dest, (dest / "report.html").read_text(), logs, cap_file)
    return out


def _csv(dest: Path, name: str) -> list[dict]:
    import csv

    with open(dest / "tables" / f"{name}.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _transit_spans(logs: Path) -> list[tuple[float, float, int]]:
    """Each transit session's relaying time and bytes, straight from the log lines."""
    spans = []
    for f in logs.glob("*.jsonl"):
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if e["service"] == "transit" and e["event"] == "session":
                w = e["waiting_time"] or 0.0
                spans.append((e["started"] + w, e["duration"] - w, e["total_bytes"]))
    return spans


@pytest.mark.timeout(1200)
def test_the_peak_is_the_busiest_second_of_the_burst_beside_the_minute_mean(pages):
    dest, html, logs, _ = pages["one"]
    spans = _transit_spans(logs)
    per_second = _brute_force_peaks(spans, 1)
    burst_minute = int(BURST_AT + 6) // 60
    assert per_second[burst_minute] >= 1e9  # 1 GB/s from the burst, plus what else ran in that second
    assert max(per_second.values()) == per_second[burst_minute]
    minute_row = next(r for r in _csv(dest, "load_minute")
                      if r["service"] == "transit" and r["minute"].startswith("2026-01-01T15:10"))
    assert float(minute_row["bytes_per_s_peak"]) == pytest.approx(per_second[burst_minute], rel=1e-9)
    mean = float(minute_row["bytes_per_s"])
    assert mean < per_second[burst_minute] / 10  # the minute mean hides the burst ...
    # ... and the page shows both, named apart, with units
    assert cell(html, "load_hour.bytes_per_s_peak", **{"load_hour.service": "transit"}) == si(
        per_second[burst_minute], "B/s")
    busiest_minute = max(float(r["bytes_per_s"]) for r in _csv(dest, "load_minute") if r["service"] == "transit")
    assert cell(html, "load_hour.bytes_per_s_busiest_minute", **{"load_hour.service": "transit"}) == si(
        busiest_minute, "B/s")
    labels = [label for t in tables_of(html) for label in t["labels"]]
    assert "Peak throughput (busiest second)" in labels and "Busiest minute's mean throughput" in labels
    assert cell(html, "capacity_plan.peak", **{"capacity_plan.service": "transit",
                                               "capacity_plan.resource": "throughput"}) == si(
        per_second[burst_minute], "B/s")
    assert "Session times in these logs carry fractions of a second" in html


def test_one_day_has_no_forecast_and_says_why(pages):
    dest, html, _, _ = pages["one"]
    assert html.count('<span class="badge unknown">no forecast yet</span>') == 3
    assert "1 complete day (and 1 partial) of the 14 a trend needs" in html
    for row in _csv(dest, "capacity_plan"):  # no node count is a forecast
        assert (row["enough_history"], row["nodes_needed_horizon"], row["peak_horizon"]) == ("False", "", "")
    for svc in ("mailbox", "transit", "relay"):
        assert cell(html, "capacity_by_service.nodes_needed_horizon", **{"capacity_by_service.service": svc}) == (
            "no forecast")
        assert cell(html, "capacity_by_service.limiting_resource", **{"capacity_by_service.service": svc}) == (
            "no forecast")
    assert "First to fill" not in html and "-day trend" not in html
    assert "No forecast charts for mailbox, transit, relay" in html


def test_thirty_days_forecast_what_fills_first_and_when(pages):
    dest, html, _, cap = pages["thirty"]
    assert "badge unknown" not in html and "of the 14 a trend needs" not in html
    assert not [c for t in tables_of(html) for row in t["rows"] for c in row if "no forecast" in c]
    plan = {(r["service"], r["resource"]): r for r in _csv(dest, "capacity_plan")}
    assert all(r["enough_history"] == "True" and r["days"] == "30" for r in plan.values())
    transit = plan[("transit", "sessions")]
    by = {r["service"]: r for r in _csv(dest, "capacity_by_service")}["transit"]
    assert by["limiting_resource"] == "sessions" and 0 < float(transit["days_until_full"]) <= 90
    assert (f"First to fill: concurrent sessions, around {transit['full_on']} (in "
            f"{int(float(transit['days_until_full']))} days). Plan {by['nodes_needed_horizon']} nodes by 2026-04-") in html
    assert html.count('<span class="badge soon">') == 1 and html.count('<span class="badge ok">') == 2
    assert html.count("90-day trend</text>") == 9  # a forecast chart per service and resource
    # the assumptions say which figure came from the file and which are defaults
    assert cell(html, "assumption.source", **{"assumption.service": "transit",
                                              "assumption.resource": "concurrent sessions"}) == f"from {cap}"
    assert cell(html, "assumption.source", **{"assumption.service": "relay",
                                              "assumption.resource": "throughput"}) == "built-in default"
    assert "[transit]\nnodes = 1  # running today\nsessions = 8\n" in html
    assert "Headroom 30 %</b> (built-in default)" in html and "<b>14 complete days</b> (built-in default)" in html


def test_empty_logs_explain_themselves(pages):
    _, html, _, _ = pages["empty"]
    assert "No finished sessions or connections in these logs yet." in html
    assert "4,320 events read are periodic stats lines" in html
    assert "Nothing to plan yet" in html and "No capacity plan" in html and "No load to show" in html
    assert "<svg" not in html and "<td" in html  # the assumptions still show


@pytest.mark.parametrize("name", ["one", "thirty", "empty"])
def test_pages_are_self_contained_and_never_say_none(pages, name):
    _, html, _, _ = pages[name]
    text = re.sub(r"<[^>]+>", " ", html)
    assert not re.search(r"\b(None|nan|NaN|null|inf)\b", text)
    assert not re.search(r'="(None|nan)"', html)
    assert "<script" not in html and "<link" not in html and " src=" not in html and "url(" not in html
    assert re.sub(r'xmlns="http://www.w3.org/2000/svg"', "", html).count("://") == 0
    # raw identifiers stay out of what the reader sees (they are in the tooltips and the CSV)
    headers = [label for t in tables_of(html) for label in t["labels"]]
    assert headers and not [h for h in headers if "_" in h]


@pytest.mark.parametrize("name", ["one", "thirty"])
def test_axes_and_buckets(pages, name):
    _, html, _, _ = pages[name]
    charts = html.split("<svg")[1:]
    assert charts
    for svg in charts:
        ticks = re.findall(r'class="xtick"[^>]*>([^<]*)<', svg)
        assert len(ticks) == len(set(ticks)), ticks
    buckets = re.findall(r'class="bucket"[^>]*>([^<]*)<', html)
    assert buckets and all(re.fullmatch(r"[\d.]+( \w+)?–[\d.]+ \w+|≥ [\d.]+ \w+", b) for b in buckets), buckets
    assert "0–1 kB" in buckets and "0B" not in buckets


# What each state must show in the browser, as pixels: a badge colour, the charts' blue, the grey
# note of an empty section.
COLOURS = {"unknown": (0x5D, 0x6D, 0x7E), "soon": (0xD6, 0x89, 0x10), "chart": (0x1F, 0x77, 0xB4),
           "empty": (0x99, 0x99, 0x99)}
EXPECT = {"one": {"unknown", "chart"}, "thirty": {"soon", "chart"}, "empty": {"empty"}}


@pytest.mark.parametrize("name", ["one", "thirty", "empty"])
def test_chromium_renders_each_state(pages, name, tmp_path):
    dest, _, _, _ = pages[name]
    width, bpp, rows = screenshot(dest / "report.html", tmp_path, 3000)
    seen = dict.fromkeys(COLOURS, 0)
    for row in rows:
        for i in range(0, len(row), bpp):
            px = row[i:i + 3]
            for key, (r, g, b) in COLOURS.items():
                if abs(px[0] - r) < 12 and abs(px[1] - g) < 12 and abs(px[2] - b) < 12:
                    seen[key] += 1
    assert width == 1200
    shown = {k for k, n in seen.items() if n > 300}
    assert EXPECT[name] <= shown, seen
    if name == "empty":  # (a few pixels of anti-aliased edges may come near a colour by chance)
        assert seen["chart"] < 50 and seen["soon"] < 50
    if name == "one":
        assert seen["soon"] < 50
