"""`python -m burrow.transit_relay` as `make run` starts it: flags, start-up, pairing, SIGTERM, event log."""

import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.transit_relay.conftest import hs

ROOT = Path(__file__).resolve().parents[2]


def test_main_serves_and_stops_on_sigterm(tmp_path):
    log = tmp_path / "logs" / "transit.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "burrow.transit_relay", "--event-log", str(log), "--host", "127.0.0.1",
         "--port", "0", "--websocket-port", "0", "--admin-port", "0", "--stats-interval", "3600"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        deadline = time.monotonic() + 20
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            m = re.search(r"transit relay on tcp 127\.0\.0\.1:(\d+) websocket (\d+) admin (\d+)", line)
            if m:
                port = int(m.group(1))
        assert port, "no start-up line"
        a = socket.create_connection(("127.0.0.1", port))
        b = socket.create_connection(("127.0.0.1", port))
        a.sendall(hs(b"a"))
        time.sleep(0.1)
        b.sendall(hs(b"b"))
        assert a.recv(3) == b"ok\n" and b.recv(3) == b"ok\n"
        a.sendall(b"hello")
        assert b.recv(5) == b"hello"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert b.recv(10) == b""  # the pair was closed on shutdown
    finally:
        if proc.poll() is None:
            proc.kill()
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(r["event"], r["mood"], r["total_bytes"]) for r in rows] == [("session", "happy", 5)]
