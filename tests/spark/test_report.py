"""burrow-report as a real process on synthetic logs, its CLI errors, and the HTML in headless Chromium."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

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


@pytest.mark.slow
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
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run",
                    f"--user-data-dir={tmp_path / 'chromium'}", f"--screenshot={shot}", "--window-size=1200,2000",
                    (out / "report.html").as_uri()], capture_output=True, timeout=120, check=False)
    assert shot.exists(), "chromium wrote no screenshot"
    width, bpp, rows = _png_pixels(shot)
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


def test_render_needs_no_spark():
    meta = {"generated": "now", "logs": ["x"], "events": 3, "first_day": "2026-01-01", "last_day": "2026-01-02",
            "ingest": "", "rejected": {"malformed": 1}, "unknown_versions": {2: 1}, "headroom": 0.3,
            "horizon_days": 5}
    html = render({"meta": meta, "load_hour": [], "outcomes": [
        {"service": "transit", "kind": "session", "outcome": "happy", "sessions": 3}],
        "summary": [], "distributions": [], "plan": [], "plan_by_service": [], "forecast": []})
    assert "v=2: 1 lines" in html and "malformed: 1" in html and html.count("<svg") == 1
