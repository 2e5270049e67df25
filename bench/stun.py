"""STUN Binding requests/s: burrow's STUN server against coturn's `turnserver`, same run, loopback only.

Both servers run as separate processes on 127.0.0.1 (ephemeral ports). The same bounded load
generator drives each: `--clients` processes (one case per value), each with one UDP socket keeping `--window` requests
in flight, until `--requests` answers arrived or `--seconds` passed. Server CPU time per 1000
answers comes from the server process's user+system time (all its threads). Our rate limit is
raised far above the offered load so the limiter is still on the path but never refuses.

    .venv/bin/python bench/stun.py [--requests 150000] [--seconds 4] [--window 32] [--clients 1,2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from burrow.wire.stun import build_binding_request, parse_binding_response  # noqa: E402

OURS = """
import asyncio, sys
sys.path.insert(0, {root!r})
from burrow.packet_relay.stun_server import start_stun_server
async def main():
    server = await start_stun_server("127.0.0.1", 0, rate_per_source=1e9, burst=1_000_000, registry=None)
    print(server.port, flush=True)
    await asyncio.sleep({lifetime})
    server.close()
asyncio.run(main())
"""


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(port: int, timeout: float) -> tuple[str, int]:
    """One checked Binding exchange: the server must report our own address and port."""
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        s.settimeout(0.2)
        txid = os.urandom(12)
        while time.monotonic() < deadline:
            s.sendto(build_binding_request(txid), ("127.0.0.1", port))
            try:
                data = s.recv(2048)
            except TimeoutError:
                continue
            mapped = parse_binding_response(data, txid)
            if mapped != s.getsockname():
                raise SystemExit(f"server on {port} reported {mapped}, expected {s.getsockname()}")
            return mapped
    raise SystemExit(f"no STUN answer on port {port} within {timeout}s")


def _client(port: int, total: int, window: int, seconds: float, out) -> None:
    """Keep `window` requests in flight; a lost datagram is replaced after a short timeout."""
    requests = [build_binding_request(i.to_bytes(4, "big") + os.urandom(8)) for i in range(256)]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", port))
    s.settimeout(0.05)
    buf = bytearray(2048)
    send, recv_into = s.send, s.recv_into
    answered = sent = lost = 0
    deadline = time.monotonic() + seconds
    for i in range(window):
        send(requests[i & 255])
    sent = window
    start = time.perf_counter()
    while answered < total:
        try:
            recv_into(buf)
        except TimeoutError:
            lost += window  # refill the whole window; late answers just count as answers
            for i in range(window):
                send(requests[i & 255])
            sent += window
            if time.monotonic() > deadline:
                break
            continue
        answered += 1
        if sent < total:
            send(requests[sent & 255])
            sent += 1
        if not answered & 1023 and time.monotonic() > deadline:
            break
    out.send((answered, time.perf_counter() - start, lost))
    s.close()


def load(port: int, total: int, window: int, seconds: float, clients: int) -> tuple[int, float, int]:
    ctx = multiprocessing.get_context("fork")
    pipes, procs = [], []
    for _ in range(clients):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_client, args=(port, total // clients, window, seconds, child))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    results = [p.recv() for p in pipes]
    for proc in procs:
        proc.join(timeout=seconds + 5)
    answered = sum(r[0] for r in results)
    elapsed = max(r[1] for r in results)
    return answered, elapsed, sum(r[2] for r in results)


def measure(name: str, pid: int, port: int, clients: int, args) -> dict:
    probe(port, 10)
    load(port, 2000, args.window, 2, 1)  # warm-up
    proc = psutil.Process(pid)
    cpu0 = sum(proc.cpu_times()[:2])
    answered, elapsed, lost = load(port, args.requests, args.window, args.seconds, clients)
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    probe(port, 5)  # still answering correctly after the load
    return {"name": name, "clients": clients, "answered": answered, "rate": answered / elapsed, "lost": lost,
            "cpu_ms_per_1k": 1000 * cpu / max(1, answered) * 1000}


def start_ours(lifetime: float) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", OURS.format(root=ROOT, lifetime=lifetime)],
                            stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def start_coturn(tmp: str) -> tuple[subprocess.Popen, int]:
    port = free_udp_port()
    cmd = ["turnserver", "-n", "--listening-ip=127.0.0.1", f"--listening-port={port}",
           f"--alt-listening-port={free_udp_port()}", "--stun-only", "--no-auth", "--no-tls",
           "--no-dtls", "--no-tcp", "--no-cli", "--simple-log", "--log-file", os.path.join(tmp, "coturn.log"),
           "--pidfile", os.path.join(tmp, "coturn.pid"), "--userdb", os.path.join(tmp, "coturn.db")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=150000, help="answers to collect per server")
    parser.add_argument("--seconds", type=float, default=4.0, help="time bound per server")
    parser.add_argument("--window", type=int, default=32, help="requests in flight per client")
    parser.add_argument("--clients", default="1,2", help="load generator processes, one case per value")
    args = parser.parse_args()
    if shutil.which("turnserver") is None:
        raise SystemExit("coturn's turnserver is not installed (apt-get install coturn)")

    cases = [int(c) for c in args.clients.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        coturn, coturn_port = start_coturn(tmp)
        ours, our_port = start_ours(lifetime=2 * len(cases) * (args.seconds + 4) + 30)
        try:
            for clients in cases:
                rows.append(measure("burrow (asyncio, 1 thread)", ours.pid, our_port, clients, args))
                rows.append(measure("coturn turnserver --stun-only", coturn.pid, coturn_port, clients, args))
        finally:
            for proc in (ours, coturn):
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()

    print(f"STUN Binding requests on loopback, window {args.window} per client, up to {args.requests} "
          f"answers or {args.seconds:g} s per case; {os.cpu_count()} CPUs shared by servers and load\n")
    print("| load | server | answered | requests/s | vs coturn | server CPU ms / 1k requests |")
    print("|---|---|---:|---:|---:|---:|")
    ratios = []
    for ours_row, coturn_row in zip(rows[::2], rows[1::2], strict=True):
        ratios.append(ours_row["rate"] / coturn_row["rate"])
        for row in (ours_row, coturn_row):
            print(f"| {row['clients']} client(s) | {row['name']} | {row['answered']} | {row['rate']:,.0f} | "
                  f"{row['rate'] / coturn_row['rate']:.2f}x | {row['cpu_ms_per_1k']:.1f} |")
    worst = min(ratios)
    print(f"\nlowest ratio burrow/coturn = {worst:.2f} (goal >= 0.50): {'met' if worst >= 0.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
