#!/usr/bin/env python3
"""`make run`: start every Burrow service that exists on embedded defaults, print how to reach them.

State goes under ./var (SQLite database, event logs, self-signed certificate, relay key).
Ctrl-C (or SIGTERM) stops all services gracefully.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VAR = ROOT / "var"
LOGS = VAR / "logs"

# (package, description, arguments, lines telling a person how to reach it)
SERVICES = [
    ("burrow.mailbox_server", "mailbox",
     ["--db", str(VAR / "mailbox.sqlite"), "--event-log", str(LOGS / "mailbox.jsonl")],
     ["mailbox (rendezvous)  ws://127.0.0.1:4000/v1   admin http://127.0.0.1:9400/metrics"]),
    ("burrow.transit_relay", "transit",
     ["--event-log", str(LOGS / "transit.jsonl")],
     ["transit relay         tcp:127.0.0.1:4001  ws://127.0.0.1:4002   admin http://127.0.0.1:9401/metrics"]),
    ("burrow.discovery", "discovery",
     ["--event-log", str(LOGS / "discovery.jsonl")],
     ["messaging discovery   http://127.0.0.1:4003/messaging-discovery/   admin http://127.0.0.1:9403/metrics"]),
    ("burrow.packet_relay", "relay",
     ["--dev-tls", "--tls-dir", str(VAR / "tls"), "--key-file", str(VAR / "relay.key"),
      "--event-log", str(LOGS / "relay.jsonl"), "--messaging-port", "4004",
      "--messaging-key-file", str(VAR / "messaging.key"), "--discovery-url", "http://127.0.0.1:4003"],
     ["packet relay          https://127.0.0.1:8443/derp (DERP), /relay (iroh); self-signed   STUN udp:127.0.0.1:3478",
      "                      messaging tcp:127.0.0.1:4004 (Skywire's protocol)   admin http://127.0.0.1:9402/metrics"]),
]


def available(package: str) -> bool:
    return importlib.util.find_spec(f"{package}.__main__") is not None


def main() -> int:
    LOGS.mkdir(parents=True, exist_ok=True)
    procs: list[tuple[str, subprocess.Popen]] = []
    lines: list[str] = []
    for package, name, args, reach in SERVICES:
        if not available(package):
            continue
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen([sys.executable, "-m", package, *args], cwd=ROOT, env=env)
        procs.append((name, proc))
        lines.extend(reach)
    if not procs:
        print("no services are built yet", file=sys.stderr)
        return 1
    time.sleep(1.5)
    failed = [name for name, p in procs if p.poll() is not None]
    print("\nBurrow is running (Ctrl-C stops all):")
    for line in lines:
        print("  " + line)
    print(f"  event logs in {LOGS}; `make report` turns them into a report")
    if "mailbox" in {n for n, _ in procs}:
        print("\nTry:  .venv/bin/burrow send FILE          (defaults point at this suite)")
        print("      .venv/bin/burrow receive CODE")
        print("      .venv/bin/burrow relay-probe https://127.0.0.1:8443 --insecure --stun-port 3478")
        print("      .venv/bin/burrow messaging listen --key-file var/alice.key     (prints pk: HEX)")
        print("      .venv/bin/burrow messaging send --key-file var/bob.key HEX 'hello'")
    if failed:
        print(f"\nfailed to start: {', '.join(failed)} (see the messages above)", file=sys.stderr)
    stop = {"now": False}

    def on_signal(_sig, _frame):
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop["now"] and all(p.poll() is None for _, p in procs):
        time.sleep(0.3)
    for _, p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + 10
    for _, p in procs:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
    print("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
