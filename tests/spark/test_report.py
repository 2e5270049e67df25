"""burrow-report as a real process on synthetic logs, its CLI errors, and the HTML in headless Chromium."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from burrow.spark.capacity import load_capacity
from burrow.spark.generate import generate
from burrow.spark.report import render

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.run([sys.executable, "-m", "burrow.spark", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout)


def test_cli_refuses_missing_and_empty_input_before_starting_spark(tmp_path):
    r = _run("--logs", str(tmp_path / "nope-*.jsonl"), "--out", str(tmp_path / "out"), timeout=60)
    assert r.returncode == 2 and "no log files match" in r.stderr and "starting Spark" not in r.stderr
    (tmp_path / "a.jsonl").write_text("")
    r = _run("--logs", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "out"), timeout=60)
    assert r.returncode == 2 and "the input is empty" in r.stderr
    (tmp_path / "cap.toml").write_text("[relay]\nbandwith = 3\n")
    (tmp_path / "b.jsonl").write_text("{}\n")
    r = _run("--logs", str(tmp_path / "b.jsonl"), "--out", str(tmp_path / "out"), "--capacity",
             str(tmp_path / "cap.toml"), timeout=60)
    assert r.returncode == 2 and "unknown keys ['bandwith']" in r.stderr


def test_cli_errors_need_spark(spark, tmp_path, capsys):
    from burrow.spark.__main__ import main

    (tmp_path / "junk.jsonl").write_text("hello\nworld\n")
    with pytest.raises(SystemExit) as exc:
        main(["--logs", str(tmp_path / "junk.jsonl"), "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    assert "junk.jsonl is not an event log: all 2 lines are malformed" in capsys.readouterr().err
    (tmp_path / "stats.jsonl").write_text('{"v":7,"ts":1.0,"service":"relay","event":"stats","node":"a"}\n')
    with pytest.raises(SystemExit) as exc:
        main(["--logs", str(tmp_path / "stats.jsonl"), "--out", str(tmp_path / "out2")])
    assert exc.value.code == 2 and "no events in" in capsys.readouterr().err


def _png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) into rows of pixels."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def screenshot(page: Path, tmp_path: Path, height: int) -> tuple[int, int, list[bytes]]:
    """The page as headless Chromium draws it, 1200 px wide: (width, bytes per pixel, rows)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Debian's chromium is needed for this test: apt-get install -y chromium")
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run",
                    f"--user-data-dir={tmp_path / 'chromium'}", f"--screenshot={shot}",
                    f"--window-size=1200,{height}", page.as_uri()], capture_output=True, timeout=120, check=False)
    assert shot.exists(), "chromium wrote no screenshot"
    return _png_pixels(shot)


@pytest.mark.slow
@pytest.mark.timeout(900)  # a whole burrow-report run (JVM start, Spark) plus Chromium: minutes on a busy machine
def test_report_process_and_chromium_screenshot(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Debian's chromium is needed for this test: apt-get install -y chromium")
    gen = generate(str(tmp_path / "logs"), events=6000, days=3, nodes=1, malformed=2)
    out = tmp_path / "out"
    r = _run("--logs", str(tmp_path / "logs" / "*.jsonl"), "--out", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{sum(gen.counts.values()):,} events in the dataset" in r.stderr
    assert "malformed 2" in r.stderr
    for name in ("load_minute", "load_hour", "session_outcomes", "capacity_plan", "capacity_forecast"):
        assert (out / "tables" / f"{name}.csv").read_text().count("\n") > 1
        assert (out / "tables" / name).is_dir()
    html = (out / "report.html").read_text()
    assert html.count("<svg") >= 20 and "<polyline" in html and "<rect" in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
    width, bpp, rows = screenshot(out / "report.html", tmp_path, 2000)
    total = ink = coloured = 0
    for row in rows:
        for i in range(0, len(row), bpp):
            red, green, blue = row[i], row[i + 1], row[i + 2]
            total += 1
            if red < 235 or green < 235 or blue < 235:
                ink += 1
            if abs(red - 0x1F) < 40 and abs(green - 0x77) < 40 and abs(blue - 0xB4) < 40:
                coloured += 1  # the charts' first palette colour
    assert width == 1200
    assert ink > total * 0.02, "the screenshot is (nearly) blank"
    assert coloured > 500, "no chart lines or bars in the screenshot"


def _meta(**kw) -> dict:
    return {"generated": "now", "logs": ["x"], "events": 3, "days": ["2026-01-01", "2026-01-02"], "ingest": "",
            "rejected": {}, "unknown_versions": {}, "assumptions": load_capacity(None).assumptions(),
            "time_resolution": 0.0, "rate_window": 1} | kw


def _data(**kw) -> dict:
    return {"meta": _meta(), "load_hour": [], "outcomes": [], "summary": [], "distributions": [], "plan": [],
            "plan_by_service": [], "forecast": [], "daily": []} | kw


def test_render_needs_no_spark():
    html = render(_data(meta=_meta(rejected={"malformed": 1}, unknown_versions={2: 1})))
    assert "v=2: 1 lines" in html and "malformed: 1" in html and "Logs from 2026-01-01 to 2026-01-02" in html


def _plan_row(**kw) -> dict:
    row = {"service": "relay", "resource": "sessions", "days": 3, "enough_history": False, "peak": 500.0,
           "trend_now": 480.0, "slope_per_day": 10.0, "r2": 0.9, "capacity_per_node": 400.0, "usable_per_node": 280.0,
           "nodes": 1.0, "utilisation": 500 / 280, "nodes_needed": 2, "peak_horizon": None,
           "nodes_needed_horizon": None, "days_until_full": 0.0, "full_on": dt.date(2026, 1, 3)}
    return row | kw


def test_over_capacity_is_an_observation_even_without_history():
    plan = [_plan_row(), _plan_row(resource="bytes_per_s", peak=1e6, capacity_per_node=240e6, usable_per_node=168e6,
                                   utilisation=1e6 / 168e6, nodes_needed=1, days_until_full=None, full_on=None)]
    daily = [{"service": "relay", "day": dt.date(2026, 1, d), "complete": d < 4} for d in (1, 2, 3, 4)]
    by = [{"service": "relay", "nodes": 1, "days": 3, "enough_history": False, "nodes_needed": 2,
           "nodes_needed_horizon": None, "days_until_full": 0.0, "full_on": dt.date(2026, 1, 3),
           "limiting_resource": "sessions", "utilisation": 500 / 280, "busiest_resource": "sessions"}]
    html = render(_data(plan=plan, plan_by_service=by, daily=daily))
    assert ('<span class="badge over">over capacity</span> <b>relay</b>: Over capacity now: add nodes '
            "(2 needed, 1 running).") in html
    assert "Concurrent sessions peaked at 500, 179 % of what 1 node can carry with headroom" in html
    assert "No forecast yet: 3 complete days (and 1 partial) of the 14 a trend needs." in html
    assert "over now (observed)" in html and "now (observed)" in html
    # services without sessions are not listed as if they were planned; the others say so
    assert "<b>mailbox</b>" not in html


def test_every_service_in_the_logs_gets_a_verdict():
    from burrow.spark.advice import verdicts

    rows = [_plan_row(service="transit", enough_history=True, days=20, peak=10.0, utilisation=10 / 280,
                      nodes_needed=1, peak_horizon=30.0, nodes_needed_horizon=1, days_until_full=None, full_on=None,
                      slope_per_day=-1.0)]
    daily = [{"service": s, "day": dt.date(2026, 1, d), "complete": True} for s in ("transit", "relay")
             for d in range(1, 21)]
    got = {v.service: v for v in verdicts(rows, daily, horizon_days=90, min_history_days=14)}
    assert got["transit"].level == "ok" and "no resource's daily peak is growing" in got["transit"].detail
    assert got["transit"].headline == "Nothing is close: the 1 node running today is enough to 2026-04-20."
    assert got["relay"].level == "idle" and list(got) == ["transit", "relay"]
