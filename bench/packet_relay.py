#!/usr/bin/env python3
"""Packet relay benchmark: burrow-relay (DERP over TLS, STUN) with coturn's STUN side by side.

The relay runs as `python -m burrow.packet_relay` pinned to one core (taskset -c 0); this process is the
load generator on the other core. Every phase is bounded (packet counts and a few seconds).

  forwarding   1200-byte packets, 1 / 4 / 16 sender->receiver pairs over TLS: packets/s, Gbit/s
               of payload delivered, and drops
  cross-node   two relays meshed over TLS (--mesh-with), senders on node A, receivers on node B:
               packets/s, drops, and relay CPU per packet summed over both nodes, against the
               single-node figure (both nodes share the relay core)
  latency      one pair echoing single packets: relay round trip / 2 (p50, p99), idle and while
               4 other pairs flood, at real-time priority where allowed (as paced)
  paced        4 pairs x 6,000 packets/s in bursts of 8 (bench/packet_relay_paced.py): relay CPU per
               packet at a steady modest rate, with the default (adaptive) wake-up coalescing; again
               on a relay that never holds a wake-up (--wake-coalesce-us 0), with its latency rows;
               and there in lock-step (each round one burst per pair, all received before the next),
               the same wake-up structure whatever else runs on the machine
  iroh         the same forwarding over the iroh relay protocol (WebSocket /relay, single and
               batched datagrams; bench/packet_relay_iroh.py): relay CPU per packet next to DERP's
  memory       N idle TLS DERP connections (handshake done): relay RSS delta / N
  STUN         Binding requests answered per second, our server vs coturn (`turnserver -S`), same
               client, same core

Usage: .venv/bin/python bench/packet_relay.py [--quick] [--idle N] [--json PATH] [--mesh-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import select
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository: harness/

from packet_relay_load import pump  # noqa: E402

from burrow.wire.derp import frames as f  # noqa: E402
from burrow.wire.derp.connection import ClientConnection, Connected  # noqa: E402
from burrow.wire.derp.handshake import generate_private_key  # noqa: E402
from burrow.wire.stun import build_binding_request  # noqa: E402
from harness.ports import free_port  # noqa: E402

PKT = 1200
RECV_FRAME = f.FRAME_HEADER_LEN + 32 + PKT
BACKGROUND_PPS = 5000  # per background pair in the latency phase
NEVER_HOLD = ("--wake-coalesce-us", "0")  # the second relay: asyncio's own loop, no coalescing
UPGRADE = b"GET /derp HTTP/1.1\r\nHost: bench\r\nUpgrade: DERP\r\nConnection: Upgrade\r\n\r\n"


def start_relay(tmp: str, stun_port: int, https_port: int = 0, name: str = "relay",
                extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, "-m", "burrow.packet_relay", "--host", "127.0.0.1", "--dev-tls", "--tls-dir", tmp + "/tls",
           "--https-port", str(https_port), "--admin-port", "0", "--stun-port", str(stun_port),
           "--stun-rate-per-source", "0", "--key-file", f"{tmp}/{name}.key", *extra]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    deadline = time.time() + 20
    while time.time() < deadline:
        line = proc.stderr.readline().decode()
        if m := re.search(r"relay up: https (\d+)", line):
            return proc, int(m.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("relay did not start")


class Conn:
    def __init__(self, reader, writer, key: bytes) -> None:
        self.reader, self.writer, self.key = reader, writer, key


async def connect(port: int, ctx: ssl.SSLContext) -> Conn:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost",
                                                   limit=1 << 20)
    writer.write(UPGRADE)
    await reader.readuntil(b"\r\n\r\n")
    machine = ClientConnection(generate_private_key())
    while True:
        data = await asyncio.wait_for(reader.read(65536), 10)
        if not data:
            raise ConnectionError("relay closed during handshake")
        events = machine.receive_data(data)
        writer.write(machine.data_to_send())
        if any(isinstance(e, Connected) for e in events):
            return Conn(reader, writer, machine.client_public)


def connect_blocking(port: int, ctx: ssl.SSLContext) -> tuple[ssl.SSLSocket, bytes]:
    sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
    sock.sendall(UPGRADE)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(4096)
    machine = ClientConnection(generate_private_key())
    events = machine.receive_data(buf.split(b"\r\n\r\n", 1)[1])
    while True:
        sock.sendall(machine.data_to_send())
        if any(isinstance(e, Connected) for e in events):
            return sock, machine.client_public
        events = machine.receive_data(sock.recv(65536))


def forwarding(port: int, ctx, pairs: int, total: int, relay_pid: int) -> dict:
    conns = [connect_blocking(port, ctx) for _ in range(2 * pairs)]
    senders, receivers = conns[:pairs], conns[pairs:]
    batch = 64
    rounds = total // pairs // batch
    blobs = [send_blob(key, batch) for _, key in receivers]
    got_bytes, elapsed, cpu = pump([s for s, _ in senders], [r for r, _ in receivers], blobs, rounds,
                                   rounds * batch * RECV_FRAME, relay_pid)
    sent, got = pairs * rounds * batch, sum(n // RECV_FRAME for n in got_bytes)
    return {"pairs": pairs, "sent": sent, "delivered": got, "seconds": elapsed, "pps": got / elapsed,
            "gbps": got * PKT * 8 / elapsed / 1e9, "drop_pct": 100.0 * (sent - got) / sent,
            "relay_cpu_pct": 100.0 * cpu / elapsed, "pps_per_relay_cpu_second": got / max(cpu, 1e-9)}


def start_mesh(tmp: str, tls: bool = True) -> list[tuple[subprocess.Popen, int]]:
    """Two relays meshed with each other (one certificate, one mesh key), on the relay core; the mesh
    links over TLS, or over each node's plain --http-port (a private network between nodes)."""
    with open(tmp + "/mesh.key", "w") as fh:
        fh.write(os.urandom(32).hex())
    ports, plain = [free_port(), free_port()], [free_port(), free_port()]
    peers = ",".join(f"https://127.0.0.1:{p}" for p in ports) if tls else \
        ",".join(f"http://127.0.0.1:{p}" for p in plain)
    extra = ("--mesh-key-file", tmp + "/mesh.key", "--mesh-with", peers, "--mesh-ca-file", tmp + "/tls/relay.crt")
    return [start_relay(tmp, 0, port, f"node{i}", (*extra, "--http-port", str(plain[i])))
            for i, port in enumerate(ports)]


def wait_route(sender: ssl.SSLSocket, receiver: ssl.SSLSocket, dst: bytes) -> None:
    """Send single packets until one arrives (the mesh learns the receiver a moment after it connects),
    then read until quiet so nothing of the warm-up is counted later."""
    receiver.settimeout(0.1)
    for _ in range(200):
        sender.sendall(send_blob(dst, 1))
        try:
            if receiver.recv(65536):
                break
        except TimeoutError:
            continue
    else:
        raise SystemExit("the mesh never delivered a packet")
    receiver.settimeout(0.3)
    try:
        while receiver.recv(65536):
            pass
    except TimeoutError:
        pass
    receiver.settimeout(None)


def cross_node(ports: list[int], ctx, pairs: int, total: int, pids: list[int]) -> dict:
    senders = [connect_blocking(ports[0], ctx) for _ in range(pairs)]
    receivers = [connect_blocking(ports[1], ctx) for _ in range(pairs)]
    for (s, _), (r, key) in zip(senders, receivers, strict=True):
        wait_route(s, r, key)
    batch = 64
    rounds = total // pairs // batch
    blobs = [send_blob(key, batch) for _, key in receivers]
    got_bytes, elapsed, cpu = pump([s for s, _ in senders], [r for r, _ in receivers], blobs, rounds,
                                   rounds * batch * RECV_FRAME, pids)
    sent, got = pairs * rounds * batch, sum(n // RECV_FRAME for n in got_bytes)
    return {"pairs": pairs, "sent": sent, "delivered": got, "seconds": elapsed, "pps": got / elapsed,
            "drop_pct": 100.0 * (sent - got) / sent, "relay_cpu_pct": 100.0 * cpu / elapsed,
            "us_per_packet": 1e6 * cpu / max(got, 1)}


def send_blob(dst: bytes, n: int) -> bytes:
    payload = os.urandom(PKT)
    return (f.header(f.SEND_PACKET, 32 + PKT) + dst + payload) * n


async def latency(port: int, ctx, samples: int, background_pairs: int) -> dict:
    a, b = await connect(port, ctx), await connect(port, ctx)
    stop = asyncio.Event()
    bg_tasks = []
    if background_pairs:
        bg = [await connect(port, ctx) for _ in range(2 * background_pairs)]

        async def flood(s: Conn, r: Conn) -> None:  # 32 packets every 6.4 ms: 5,000 packets/s per pair
            blob = send_blob(r.key, 32)
            while not stop.is_set():
                s.writer.write(blob)
                await s.writer.drain()
                await asyncio.sleep(32 / BACKGROUND_PPS)

        async def sink(r: Conn) -> None:
            while not stop.is_set():
                if not await r.reader.read(1 << 20):
                    return

        for i in range(background_pairs):
            bg_tasks += [asyncio.create_task(flood(bg[i], bg[background_pairs + i])),
                         asyncio.create_task(sink(bg[background_pairs + i]))]
        await asyncio.sleep(0.3)

    async def echo() -> None:  # b sends back every packet it gets
        dec = f.FrameDecoder(1 << 20)
        while True:
            data = await b.reader.read(65536)
            if not data:
                return
            dec.feed(data)
            while (raw := dec.next_raw()) is not None:
                if raw[0] == f.RECV_PACKET:
                    b.writer.write(f.header(f.SEND_PACKET, len(raw[1])) + a.key + raw[1][32:])

    echo_task = asyncio.create_task(echo())
    dec = f.FrameDecoder(1 << 20)
    rtts = []
    payload = bytes(PKT)
    for _ in range(samples):
        t0 = time.perf_counter()
        a.writer.write(f.header(f.SEND_PACKET, 32 + PKT) + b.key + payload)
        got = False
        while not got:
            dec.feed(await asyncio.wait_for(a.reader.read(65536), 10))
            while (raw := dec.next_raw()) is not None:
                got = got or raw[0] == f.RECV_PACKET
        rtts.append((time.perf_counter() - t0) / 2 * 1000)
    stop.set()
    echo_task.cancel()
    for t in bg_tasks:
        t.cancel()
    await asyncio.gather(echo_task, *bg_tasks, return_exceptions=True)
    rtts.sort()
    return {"background_pairs": background_pairs, "p50_ms": statistics.median(rtts),
            "p99_ms": rtts[int(len(rtts) * 0.99) - 1]}


async def idle_memory(port: int, ctx, relay_pid: int, n: int) -> dict:
    proc = psutil.Process(relay_pid)
    warm = await asyncio.gather(*(connect(port, ctx) for _ in range(50)))  # one-time start-up costs
    for c in warm:
        c.writer.close()
    await asyncio.sleep(0.5)
    rss0 = proc.memory_info().rss
    conns = []
    for i in range(0, n, 50):
        conns += await asyncio.gather(*(connect(port, ctx) for _ in range(min(50, n - i))))
    await asyncio.sleep(1.0)
    rss1 = proc.memory_info().rss
    for c in conns:
        c.writer.close()
    await asyncio.sleep(0.5)
    return {"connections": n, "rss_delta_mb": (rss1 - rss0) / 1e6, "bytes_per_conn": (rss1 - rss0) / n}


def stun_rate(port: int, seconds: float, sockets: int = 4, window: int = 32) -> float:
    socks = []
    for _ in range(sockets):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        socks.append(s)
    requests = [build_binding_request(os.urandom(12)) for _ in range(256)]
    answered, k = 0, 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        for s in socks:
            for _ in range(window):
                s.send(requests[k & 255])
                k += 1
        expect, got = window * sockets, 0
        wait_until = time.perf_counter() + 0.2
        while got < expect and time.perf_counter() < wait_until:
            ready, _, _ = select.select(socks, [], [], 0.05)
            for s in ready:
                while True:
                    try:
                        s.recv(2048)
                        got += 1
                    except BlockingIOError:
                        break
        answered += got
    elapsed = time.perf_counter() - t0
    for s in socks:
        s.close()
    return answered / elapsed


def start_coturn(port: int) -> subprocess.Popen | None:
    exe = shutil.which("turnserver")
    if exe is None:
        return None
    cmd = [exe, "-n", "--listening-ip=127.0.0.1", f"--listening-port={port}", "--no-tls", "--no-dtls",
           "--stun-only", "--no-cli", "--no-stdout-log", "--log-file=/dev/null", "--simple-log"]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # wait until it answers
        s.settimeout(0.2)
        for _ in range(50):
            s.sendto(build_binding_request(os.urandom(12)), ("127.0.0.1", port))
            try:
                s.recv(2048)
                return proc
            except OSError:
                if proc.poll() is not None:
                    return None
    proc.kill()
    return None


async def run(args) -> dict:
    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > 1:
        os.sched_setaffinity(0, {1})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    results: dict = {}
    total = 30_000 if args.quick else 120_000
    with tempfile.TemporaryDirectory() as tmp:
        nodes = start_mesh(tmp)
        try:
            ports, pids = [port for _, port in nodes], [proc.pid for proc, _ in nodes]
            results["cross_node"] = [cross_node(ports, ctx, p, total, pids) for p in (1, 4)]
            # the single-node figure of the same moment: node B alone (sender and receiver both on it)
            results["one_node"] = [forwarding(ports[1], ctx, p, total, pids[1]) for p in (1, 4)]
        finally:
            for proc, _ in nodes:
                proc.terminate()
                proc.wait(10)
    with tempfile.TemporaryDirectory() as tmp:
        nodes = start_mesh(tmp, tls=False)
        try:
            ports, pids = [port for _, port in nodes], [proc.pid for proc, _ in nodes]
            results["cross_node"].append({**cross_node(ports, ctx, 1, total, pids), "plain": True})
        finally:
            for proc, _ in nodes:
                proc.terminate()
                proc.wait(10)
    if args.mesh_only:
        results["forwarding"] = results["one_node"]
        return results
    with tempfile.TemporaryDirectory() as tmp:
        stun_port = free_port(socket.SOCK_DGRAM)
        relay, port = start_relay(tmp, stun_port)
        try:
            results["memory"] = await idle_memory(port, ctx, relay.pid, args.idle)
            results["forwarding"] = [forwarding(port, ctx, p, total, relay.pid) for p in (1, 4, 16)]
            iroh = _iroh_bench()
            results["iroh"] = [iroh.iroh_forwarding(port, ctx, p, total, relay.pid, batch=b)
                               for b in (False, True) for p in (1, 4)]
            paced = _paced_bench()
            results["paced"] = await paced.paced_cpu(lambda: connect(port, ctx), lambda key: send_blob(key, paced.BURST),
                                                     RECV_FRAME, relay.pid, seconds=1.0 if args.quick else 5.0)
            n = 300 if args.quick else 2000
            with paced.realtime(relay.pid):  # a busy machine's scheduling delays would swamp the relay's
                results["latency"] = [await latency(port, ctx, n, 0), await latency(port, ctx, n, 4)]
            secs = 1.0 if args.quick else 2.0
            results["stun"] = {"burrow": stun_rate(stun_port, secs)}
        finally:
            relay.terminate()
            relay.wait(10)
        # the same paced load, the lock-step and the latency on a relay that never holds a wake-up
        relay, port = start_relay(tmp, 0, extra=NEVER_HOLD)
        try:
            results["paced_never_held"] = {**await paced.paced_cpu(
                lambda: connect(port, ctx), lambda key: send_blob(key, paced.BURST), RECV_FRAME, relay.pid,
                seconds=1.0 if args.quick else 5.0), "never_held": True}
            results["lockstep"] = await paced.lockstep_cpu(lambda: connect(port, ctx),
                                                           lambda key: send_blob(key, paced.BURST), RECV_FRAME,
                                                           relay.pid, rounds=600 if args.quick else 3000)
            with paced.realtime(relay.pid):
                results["latency"] += [{**await latency(port, ctx, n, b), "never_held": True} for b in (0, 4)]
        finally:
            relay.terminate()
            relay.wait(10)
        coturn_port = free_port(socket.SOCK_DGRAM)
        coturn = start_coturn(coturn_port)
        if coturn is not None:
            try:
                results["stun"]["coturn"] = stun_rate(coturn_port, secs)
            finally:
                coturn.terminate()
                coturn.wait(10)
    return results


def _iroh_bench():
    """bench/packet_relay_iroh.py (the iroh path)."""
    import packet_relay_iroh

    return packet_relay_iroh


def _paced_bench():
    """bench/packet_relay_paced.py (CPU per packet at a fixed rate)."""
    import packet_relay_paced

    return packet_relay_paced


def table(r: dict) -> str:
    out = ["| measurement | result |", "|---|---|"]
    for x in r.get("cross_node", []):
        single = next((d for d in r["one_node"] if d["pairs"] == x["pairs"]), None)
        versus = ""
        if single:
            one = 1e6 / single["pps_per_relay_cpu_second"]
            versus = f"; one node {one:.1f} µs: ratio {x['us_per_packet'] / one:.2f}"
        link = "plain TCP" if x.get("plain") else "TLS"
        out.append(f"| cross-node forwarding, {x['pairs']} pair(s), node A -> mesh ({link}) -> node B | "
                   f"{x['pps']:,.0f} packets/s, {x['drop_pct']:.1f}% dropped, relay CPU "
                   f"{x['us_per_packet']:.1f} µs per packet summed over both nodes{versus} |")
    for x in r["forwarding"]:
        out.append(f"| forwarding, {x['pairs']} pair(s), 1200-byte packets over TLS | "
                   f"{x['pps']:,.0f} packets/s = {x['gbps']:.2f} Gbit/s payload, {x['drop_pct']:.1f}% dropped, "
                   f"relay CPU {x['relay_cpu_pct']:.0f}% of one core "
                   f"({x['pps_per_relay_cpu_second'] * PKT * 8 / 1e9:.2f} Gbit/s per relay CPU-second) |")
    if "latency" not in r:
        return "\n".join(out)
    for x in r.get("iroh", []):
        derp = next((d for d in r["forwarding"] if d["pairs"] == x["pairs"]), None)
        kind = "batches of 10 datagrams (type 5)" if x["batch"] else "single datagrams (type 4)"
        versus = f"; DERP {1e6 / derp['pps_per_relay_cpu_second']:.1f} µs" if derp and not x["batch"] else ""
        out.append(f"| iroh forwarding, {x['pairs']} pair(s), 1200-byte {kind} over TLS | "
                   f"{x['pps']:,.0f} datagrams/s, {x['drop_pct']:.1f}% dropped, relay CPU "
                   f"{x['us_per_packet']:.1f} µs per datagram{versus} |")
    for x in (r.get("paced"), r.get("paced_never_held")):
        if not x:
            continue
        how = ", --wake-coalesce-us 0 (never held)" if x.get("never_held") else ", adaptive coalescing (default)"
        out.append(f"| relay CPU per forwarded 1200-byte packet, paced: {x['pairs']} pairs x {x['rate_per_pair']:,}"
                   f" packets/s over TLS{how} | {x['us_per_packet']:.1f} µs ({x['pps']:,.0f} packets/s delivered, "
                   f"{x['sent']:,} sent in all, {x['packets_per_wakeup']:.0f} packets per relay wake-up, relay CPU "
                   f"{x['relay_cpu_pct']:.0f}% of one core{', real-time priority' if x.get('realtime') else ''}; "
                   f"goal <= 9.6 µs) |")
    if x := r.get("lockstep"):
        out.append(f"| relay CPU per forwarded 1200-byte packet, lock-step: each round {x['pairs']} bursts of "
                   f"{x['packets'] // x['rounds'] // x['pairs']}, one per pair, all received before the next | "
                   f"{x['us_per_packet']:.1f} µs ({x['packets_per_wakeup']:.0f} packets per relay wake-up, "
                   f"--wake-coalesce-us 0) |")
    for x in r["latency"]:
        load = f"while {x['background_pairs']} pairs send {BACKGROUND_PPS:,} packets/s each" if x["background_pairs"] else "idle"
        if x.get("never_held"):
            load += ", --wake-coalesce-us 0"
        out.append(f"| added latency (round trip / 2), {load} | p50 {x['p50_ms']:.3f} ms, p99 {x['p99_ms']:.3f} ms |")
    m = r["memory"]
    out.append(f"| memory per idle TLS DERP connection ({m['connections']} open) | "
               f"{m['bytes_per_conn'] / 1024:.1f} KiB (RSS +{m['rss_delta_mb']:.1f} MB) |")
    s = r["stun"]
    line = f"| STUN Binding requests answered/s | burrow {s['burrow']:,.0f}"
    if s.get("coturn"):
        line += f", coturn {s['coturn']:,.0f} (ratio {s['burrow'] / s['coturn']:.2f})"
    out.append(line + " |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller counts (CI smoke run)")
    p.add_argument("--idle", type=int, default=1000, help="idle TLS connections for the memory figure")
    p.add_argument("--json", help="also write the raw results here")
    p.add_argument("--mesh-only", action="store_true", help="only the single-node and cross-node forwarding rows")
    args = p.parse_args()
    results = asyncio.run(run(args))
    print(table(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
