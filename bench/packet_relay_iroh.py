"""Relay forwarding cost per packet: the iroh path next to the DERP path, same relay process.

One relay (`python -m packet_relay`, plain HTTP on 127.0.0.1, no TLS so only forwarding is measured)
runs as its own process; this process drives two clients per case: A sends `--packets` datagrams to
B through the relay, keeping at most `--window` in flight (so nothing is dropped), until all arrived
or `--seconds` passed. The relay's CPU time (user+system) over the case divided by the datagrams
delivered is the forwarding cost. DERP clients use `Upgrade: DERP` (client/derp), iroh clients the
WebSocket at /relay (packet_relay/iroh/client.py); the `batch` case sends GSO-style batches
(frame type 5) of 10 datagrams, as iroh's QUIC stack does under load.

    .venv/bin/python bench/packet_relay_iroh.py [--packets 20000] [--seconds 5] [--window 256]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from client.derp import DerpClient  # noqa: E402
from packet_relay.iroh.client import IrohRelayClient  # noqa: E402

BATCH = 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_relay(tmp: str) -> tuple[subprocess.Popen, int]:
    for _ in range(5):
        port, admin = free_port(), free_port()
        cmd = [sys.executable, *os.environ.get("BENCH_RELAY", "-m packet_relay").split(), "--host", "127.0.0.1",
               "--https-port", "-1", "--http-port", str(port), "--stun-port", "0", "--admin-port", str(admin),
               "--key-file", os.path.join(tmp, "relay.key"), "--send-queue-depth", "1024"]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1).read()
                return proc, port
            except OSError:
                time.sleep(0.1)
        proc.kill()
        proc.wait()
    raise RuntimeError("relay did not start")


class Pair:
    """A sender and a receiver of one protocol, with the same small interface."""

    def __init__(self, proto: str, url: str) -> None:
        self.proto = proto
        if proto == "derp":
            self.a, self.b = DerpClient(url, reconnect=False), DerpClient(url, reconnect=False)
        else:
            self.a, self.b = IrohRelayClient(url), IrohRelayClient(url)

    async def start(self) -> None:
        for c in (self.a, self.b):
            await (c.start() if self.proto == "derp" else c.connect())

    def prepare(self, payload: bytes, batch: bool) -> None:
        """iroh: one masked WebSocket frame built once and written as is (the library's per-message
        cost would otherwise be what the benchmark measures)."""
        if self.proto == "iroh":
            from packet_relay.iroh import frames as f
            from packet_relay.protocol.websocket import encode_frame

            if batch:
                body = b"\x00" + (len(payload) // BATCH).to_bytes(2, "big") + payload
                msg = f.Datagrams(f.CLIENT_TO_RELAY_DATAGRAM_BATCH, self.b.endpoint_id, body).encode()
            else:
                msg = f.Datagrams(f.CLIENT_TO_RELAY_DATAGRAM, self.b.endpoint_id, b"\x00" + payload).encode()
            self.frame = encode_frame(0x2, msg, mask=True)
            self.transport = self.a.ws.transport
        self.payload = payload

    def send(self) -> None:
        if self.proto == "derp":
            self.a.send_nowait(self.b.public_key, self.payload)
        else:
            self.transport.write(self.frame)

    async def drain(self) -> None:
        if self.proto == "derp":
            await self.a.drain()
        else:
            await asyncio.sleep(0)

    async def recv(self, timeout: float) -> None:
        await (self.b.recv(timeout) if self.proto == "derp" else self.b.recv(timeout))

    async def close(self) -> None:
        await self.a.close()
        await self.b.close()


async def run_case(url: str, relay: psutil.Process, proto: str, size: int, batch: bool, packets: int,
                   seconds: float, window: int) -> dict:
    pair = Pair(proto, url)
    await pair.start()
    per_frame = BATCH if batch else 1
    frames = packets // per_frame
    payload = os.urandom(size * per_frame)
    pair.prepare(payload, batch)
    received = 0
    room = asyncio.Event()

    async def receiver() -> None:
        nonlocal received
        while received < frames:
            await pair.recv(seconds)
            received += 1
            if received % (window // 4) == 0:
                room.set()

    cpu0 = sum(relay.cpu_times()[:2])
    t0 = time.monotonic()
    task = asyncio.get_running_loop().create_task(receiver())
    sent = 0
    deadline = t0 + seconds
    while sent < frames and time.monotonic() < deadline and not task.done():
        while sent < frames and sent - received < window:
            pair.send()
            sent += 1
        await pair.drain()
        room.clear()
        if sent - received >= window:
            try:
                await asyncio.wait_for(room.wait(), max(0.01, deadline - time.monotonic()))
            except (asyncio.TimeoutError, TimeoutError):
                break
    try:
        await asyncio.wait_for(task, max(0.5, deadline - time.monotonic() + 1))
    except (asyncio.TimeoutError, TimeoutError):
        task.cancel()
    elapsed = time.monotonic() - t0
    cpu = sum(relay.cpu_times()[:2]) - cpu0
    await pair.close()
    delivered = received * per_frame
    return {"proto": proto, "case": f"{'batch %dx' % BATCH if batch else 'single '}{size} B",
            "delivered": delivered, "pps": delivered / elapsed,
            "us_per_packet": cpu / delivered * 1e6 if delivered else float("nan")}


async def main_async(args) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_relay(tmp)
        try:
            relay = psutil.Process(proc.pid)
            url = f"http://127.0.0.1:{port}"
            rows = []
            for proto, size, batch in (("derp", 100, False), ("iroh", 100, False), ("derp", 1200, False),
                                       ("iroh", 1200, False), ("iroh", 1200, True)):
                rows.append(await run_case(url, relay, proto, size, batch, args.packets, args.seconds, args.window))
            return rows
        finally:
            proc.terminate()
            proc.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--packets", type=int, default=20000)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--window", type=int, default=256)
    args = p.parse_args()
    rows = asyncio.run(main_async(args))
    print("| protocol | case | datagrams delivered | datagrams/s | relay CPU per datagram |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['proto']} | {r['case']} | {r['delivered']} | {r['pps']:,.0f} | {r['us_per_packet']:.1f} µs |")


if __name__ == "__main__":
    main()
