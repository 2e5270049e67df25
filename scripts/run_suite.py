#!/usr/bin/env python3
"""`make run`: start every Burrow service on embedded defaults, on this computer only, and say how to reach them.

State goes under ./var (SQLite database, event logs, self-signed certificate, relay and messaging keys).
Every service listens on 127.0.0.1 unless `--host` (or `make run HOST=...`) says otherwise; the banner
appears once every service answers its /readyz, and if one fails to start the others are stopped and
the exit status is 1. Ctrl-C (or SIGTERM) stops all services gracefully.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VAR = ROOT / "var"
LOGS = VAR / "logs"
START_TIMEOUT = 30.0  # seconds every service gets to answer /readyz


@dataclass(frozen=True)
class Service:
    module: str
    name: str
    admin_port: int
    args: tuple[str, ...]
    reach: tuple[str, ...]  # lines telling a person how to reach it; {host} is the bound address


SERVICES = [
    Service("burrow.mailbox_server", "mailbox", 9400,
            ("--db", str(VAR / "mailbox.sqlite"), "--event-log", str(LOGS / "mailbox.jsonl")),
            ("mailbox (rendezvous)  ws://{host}:4000/v1   admin http://127.0.0.1:9400/metrics",)),
    Service("burrow.transit_relay", "transit", 9401,
            ("--event-log", str(LOGS / "transit.jsonl")),
            ("transit relay         tcp:{host}:4001  ws://{host}:4002   admin http://127.0.0.1:9401/metrics",)),
    Service("burrow.discovery", "discovery", 9403,
            ("--event-log", str(LOGS / "discovery.jsonl")),
            ("messaging discovery   http://{host}:4003/messaging-discovery/   admin http://127.0.0.1:9403/metrics",)),
    Service("burrow.packet_relay", "relay", 9402,
            ("--dev-tls", "--tls-dir", str(VAR / "tls"), "--key-file", str(VAR / "relay.key"),
             "--event-log", str(LOGS / "relay.jsonl"), "--messaging-port", "4004",
             "--messaging-key-file", str(VAR / "messaging.key"), "--discovery-url", "http://127.0.0.1:4003"),
            ("packet relay          https://{host}:8443/derp (DERP), /relay (iroh); self-signed   STUN udp:{host}:3478",
             "                      messaging tcp:{host}:4004   admin http://127.0.0.1:9402/metrics")),
]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="make run", description=__doc__.splitlines()[0])
    p.add_argument("--host", default=os.environ.get("HOST") or "127.0.0.1",
                   help="address every service listens on (default: 127.0.0.1; '::' for every interface, "
                        "IPv4 and IPv6)")
    p.add_argument("--verbose", action="store_true", help="the services log their configuration and every connection")
    return p.parse_args(argv)


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def stop_all(procs: list[tuple[Service, subprocess.Popen]]) -> None:
    for _, p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for _, p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    LOGS.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    procs: list[tuple[Service, subprocess.Popen]] = []
    for svc in SERVICES:
        cmd = [sys.executable, "-m", svc.module, "--host", args.host, *svc.args]
        if args.verbose:
            cmd.append("--verbose")
        procs.append((svc, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)))
    stop = {"now": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))

    deadline = time.monotonic() + START_TIMEOUT
    waiting = list(procs)
    while waiting and not stop["now"]:
        dead = [svc.name for svc, p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            late = [svc.name for svc, _ in waiting]
            why = f"exited: {', '.join(dead)}" if dead else f"not ready after {START_TIMEOUT:.0f} s: {', '.join(late)}"
            print(f"make run: a service failed to start ({why}); see its messages above", file=sys.stderr)
            stop_all(procs)
            return 1
        waiting = [(svc, p) for svc, p in waiting if not ready(svc.admin_port)]
        time.sleep(0.1)
    if stop["now"]:
        stop_all(procs)
        return 0

    host = f"[{args.host}]" if ":" in args.host else args.host
    if args.host in ("::", "0.0.0.0"):
        host = "127.0.0.1"  # every interface: this computer reaches it here
    print("\nBurrow is running (Ctrl-C stops all):")
    for svc, _ in procs:
        for line in svc.reach:
            print("  " + line.format(host=host))
    print(f"  event logs in {LOGS}; `make report` turns them into a report")
    print("\nTry:  .venv/bin/burrow send FILE          (defaults point at this suite)")
    print("      .venv/bin/burrow receive CODE")
    print("      .venv/bin/burrow relay-probe https://127.0.0.1:8443 --insecure --stun-port 3478")
    print("      .venv/bin/burrow messaging listen --key-file var/alice.key     (prints pk: HEX)")
    print("      .venv/bin/burrow messaging send --key-file var/bob.key HEX 'hello'", flush=True)

    while not stop["now"]:
        exited = [svc.name for svc, p in procs if p.poll() is not None]
        if exited:
            print(f"make run: {', '.join(exited)} stopped; stopping the others", file=sys.stderr)
            stop_all(procs)
            return 1
        time.sleep(0.3)
    stop_all(procs)
    print("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
