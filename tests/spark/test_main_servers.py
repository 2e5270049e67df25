"""End to end: our real servers serve real clients; their event logs go through burrow-report and the
tables show exactly the sessions, moods and bytes the test produced.

Mailbox: magic-wormhole's own CLI (`wormhole send --text` / `wormhole receive`) through our mailbox,
and one text from our client (`burrow send --text`) to magic-wormhole.
Transit: raw `please relay` TCP pairs with known byte counts, and one partner that never comes.
"""

from __future__ import annotations

import glob
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.processes import Process

pytestmark = [pytest.mark.slow, pytest.mark.interop]

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
WORMHOLE = VENV_BIN / "wormhole"
BURROW = VENV_BIN / "burrow"
PAIRS = [(100_000, 2_000), (1_234_567, 0), (17, 65_536)]  # (bytes from first, bytes from second)
TEXT_TRANSFERS = 3  # the last one is sent by our client


def _start(args: list[str], pattern: str, log: Path) -> tuple[Process, re.Match]:
    """Start a server, read its output until `pattern` shows the bound port."""
    proc = Process([sys.executable, "-m", *args], log=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = re.search(pattern, log.read_text())
        if m:
            return proc, m
        if not proc.alive():
            break
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"{args[0]} did not start: {proc.output()[-2000:]}")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(65536, n - len(buf)))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def _relay_pair(port: int, first_bytes: int, second_bytes: int) -> None:
    token = secrets.token_hex(32)
    a = socket.create_connection(("127.0.0.1", port), timeout=30)
    a.sendall(f"please relay {token} for side {secrets.token_hex(8)}\n".encode())
    time.sleep(0.2)  # a is the first to arrive
    b = socket.create_connection(("127.0.0.1", port), timeout=30)
    b.sendall(f"please relay {token} for side {secrets.token_hex(8)}\n".encode())
    assert _recv_exactly(a, 3) == b"ok\n" and _recv_exactly(b, 3) == b"ok\n"
    payload_a, payload_b = os.urandom(first_bytes), os.urandom(second_bytes)
    got: dict[str, bytes] = {}
    t = threading.Thread(target=lambda: got.setdefault("b", _recv_exactly(b, first_bytes)))
    t.start()
    a.sendall(payload_a)
    t.join(30)
    b.sendall(payload_b)
    got["a"] = _recv_exactly(a, second_bytes)
    assert got["b"] == payload_a and got["a"] == payload_b
    a.close()
    b.close()


def _lonely(port: int) -> None:
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(f"please relay {secrets.token_hex(32)} for side {secrets.token_hex(8)}\n".encode())
    time.sleep(0.3)
    s.close()


def _text_transfer(mailbox_url: str, transit: str, n: int) -> None:
    code = f"{40 + n}-burrow-report"
    common = [str(WORMHOLE), "--relay-url", mailbox_url, "--transit-helper", transit]
    send = ([*common, "send"] if n < TEXT_TRANSFERS - 1 else
            [str(BURROW), "send", "--relay-url", mailbox_url, "--transit-helper", transit])
    sender = subprocess.Popen([*send, "--text", f"hello number {n}", "--code", code],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(1.0)
    recv = subprocess.run([*common, "receive", "--only-text", code], capture_output=True, text=True, timeout=120)
    out, _ = sender.communicate(timeout=120)
    assert recv.returncode == 0, recv.stderr
    assert f"hello number {n}" in recv.stdout
    assert sender.returncode == 0, out


def _wait_lines(path: Path, predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and predicate([json.loads(x) for x in path.read_text().splitlines() if x.strip()]):
            return
        time.sleep(0.2)


@pytest.mark.timeout(600)
def test_servers_logs_through_burrow_report(spark, tmp_path, capsys):
    if not WORMHOLE.exists():
        pytest.fail(f"magic-wormhole CLI missing at {WORMHOLE}")
    logs = tmp_path / "logs"
    mailbox, m = _start(["burrow.mailbox_server", "--host", "127.0.0.1", "--port", "0", "--admin-port", "0",
                         "--db", str(tmp_path / "mailbox.sqlite"), "--event-log", str(logs / "mailbox.jsonl")],
                        r"listening on port (\d+)", tmp_path / "mailbox.out")
    mailbox_port = int(m.group(1))
    transit, t = _start(["burrow.transit_relay", "--host", "127.0.0.1", "--port", "0", "--websocket-port", "0",
                         "--admin-port", "0", "--event-log", str(logs / "transit.jsonl")],
                        r"transit relay on tcp [^ ]*:(\d+)", tmp_path / "transit.out")
    transit_port = int(t.group(1))
    try:
        for first, second in PAIRS:
            _relay_pair(transit_port, first, second)
        _lonely(transit_port)
        for n in range(TEXT_TRANSFERS):
            _text_transfer(f"ws://127.0.0.1:{mailbox_port}/v1", f"tcp:127.0.0.1:{transit_port}", n)
        _wait_lines(logs / "transit.jsonl", lambda rows: sum(r["event"] == "session" for r in rows) >= 4)
        _wait_lines(logs / "mailbox.jsonl",
                    lambda rows: sum(r["event"] == "connection" for r in rows) >= 2 * TEXT_TRANSFERS)
    finally:
        transit.stop(30)
        mailbox.stop(30)

    raw = [json.loads(x) for f in glob.glob(str(logs / "*.jsonl")) for x in Path(f).read_text().splitlines()]
    mailbox_bytes = sum(r["bytes"] for r in raw if r["event"] == "mailbox")
    assert mailbox_bytes > 0

    from burrow.spark.__main__ import main

    out = tmp_path / "report"
    main(["--logs", str(logs / "*.jsonl"), "--out", str(out)])
    assert "report" in capsys.readouterr().err

    def table(name: str) -> list[dict]:
        return [r.asDict() for r in spark.read.parquet(str(out / "tables" / name)).collect()]

    moods = {(r["service"], r["kind"], r["outcome"]): r["sessions"] for r in table("session_outcomes")}
    assert moods == {
        ("transit", "session", "happy"): len(PAIRS),
        ("transit", "session", "lonely"): 1,
        ("mailbox", "mailbox", "happy"): TEXT_TRANSFERS,
        ("mailbox", "nameplate", "happy"): TEXT_TRANSFERS,
    }
    summary = {(r["service"], r["kind"]): r for r in table("session_summary")}
    assert summary[("transit", "session")]["bytes"] == sum(a + b for a, b in PAIRS)
    assert summary[("transit", "session")]["paired"] == len(PAIRS)
    assert summary[("mailbox", "mailbox")]["bytes"] == mailbox_bytes
    assert summary[("mailbox", "mailbox")]["pairing_rate"] == 1.0
    per_minute = table("load_minute")
    transit_bytes = sum(r["bytes"] for r in per_minute if r["service"] == "transit")
    assert transit_bytes == pytest.approx(sum(a + b for a, b in PAIRS), abs=1e-3)
    assert max(r["connections_peak"] for r in per_minute if r["service"] == "mailbox") >= 1
    events = spark.read.parquet(str(out / "events"))
    assert events.where("service = 'mailbox' AND event = 'connection'").count() == 2 * TEXT_TRANSFERS
    assert events.where("event != 'stats'").count() == len(PAIRS) + 1 + 4 * TEXT_TRANSFERS
    html = (out / "report.html").read_text()
    assert html.count("<svg") >= 6
