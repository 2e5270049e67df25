#!/usr/bin/env python3
"""Relay forwarding cost per packet: the iroh path next to the DERP path, same relay, same load.

The relay runs as `python -m burrow.packet_relay` (TLS, pinned to core 0 when taskset exists); this process
drives it from the other core with blocking TLS sockets, one thread per socket (OpenSSL runs without
the GIL), exactly as bench/packet_relay.py's forwarding phase does for DERP:
senders write 1200-byte datagrams in batches of 64 frames, receivers count delivered bytes.
The forwarding cost is the relay's CPU time (user+system) per delivered datagram.

  derp         SendPacket frames over `Upgrade: DERP` (bench/packet_relay.py's forwarding())
  iroh         ClientToRelayDatagram frames (type 4) over the WebSocket at /relay
  iroh batch   ClientToRelayDatagramBatch frames (type 5) of 10 x 1200 bytes, as iroh's QUIC stack
               sends GSO batches under load; cost per datagram

`iroh_forwarding()` is also called from bench/packet_relay.py.

Usage: .venv/bin/python bench/packet_relay_iroh.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import ssl
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repository: harness/

from nacl.signing import SigningKey  # noqa: E402
from packet_relay_load import pump  # noqa: E402

from burrow.wire.iroh import frames as f  # noqa: E402
from burrow.wire.iroh.handshake import challenge_message  # noqa: E402
from burrow.wire.websocket import binary_header, encode_frame  # noqa: E402

PKT = 1200
BATCH_SEGMENTS = 10
UPGRADE = (b"GET /relay HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Key: YmVuY2hiZW5jaGJlbmNoMQ==\r\nSec-WebSocket-Version: 13\r\n"
           b"Sec-WebSocket-Protocol: iroh-relay-v2\r\n\r\n")


def _read_message(sock: ssl.SSLSocket, buf: bytearray) -> bytes:
    """One unfragmented server message (handshake only: small, unmasked)."""
    while True:
        if len(buf) >= 2:
            n, hlen = buf[1] & 0x7F, 2
            if n == 126 and len(buf) >= 4:
                n, hlen = int.from_bytes(buf[2:4], "big"), 4
            if n != 126 and len(buf) >= hlen + n:
                msg = bytes(buf[hlen:hlen + n])
                del buf[:hlen + n]
                return msg
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("relay closed during the iroh handshake")
        buf += chunk


def connect_iroh(port: int, ctx: ssl.SSLContext) -> tuple[ssl.SSLSocket, bytes]:
    """A blocking TLS iroh connection after the challenge login; returns (socket, endpoint id)."""
    key = SigningKey.generate()
    sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
    sock.sendall(UPGRADE)
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("relay closed during the upgrade")
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        raise ConnectionError(head.split(b"\r\n", 1)[0].decode())
    buf = bytearray(rest)
    challenge = f.decode(_read_message(sock, buf))
    sig = key.sign(challenge_message(challenge.challenge)).signature
    sock.sendall(encode_frame(0x2, f.ClientAuth(bytes(key.verify_key), sig).encode(), mask=True))
    if not isinstance(f.decode(_read_message(sock, buf)), f.ServerConfirmsAuth):
        raise ConnectionError("relay denied the benchmark endpoint")
    return sock, bytes(key.verify_key)


def iroh_forwarding(port: int, ctx, pairs: int, total: int, relay_pid: int, batch: bool = False) -> dict:
    """Same shape as bench/packet_relay.py forwarding(): datagrams/s, drops, relay CPU."""
    conns = [connect_iroh(port, ctx) for _ in range(2 * pairs)]
    senders, receivers = conns[:pairs], conns[pairs:]
    per_frame = BATCH_SEGMENTS if batch else 1
    frames_per_write = 64 if not batch else 8
    rounds = max(1, total // per_frame // pairs // frames_per_write)
    body_len = 1 + f.KEY_LEN + (3 + PKT * per_frame if batch else 1 + PKT)
    recv_frame = len(binary_header(body_len)) + body_len

    def blob(dst: bytes) -> bytes:
        payload = os.urandom(PKT * per_frame)
        if batch:
            msg = f.Datagrams(f.CLIENT_TO_RELAY_DATAGRAM_BATCH, dst, b"\x00" + PKT.to_bytes(2, "big") + payload)
        else:
            msg = f.Datagrams(f.CLIENT_TO_RELAY_DATAGRAM, dst, b"\x00" + payload)
        return encode_frame(0x2, msg.encode(), mask=True) * frames_per_write

    got_bytes, elapsed, cpu = pump([s for s, _ in senders], [r for r, _ in receivers],
                                   [blob(key) for _, key in receivers], rounds,
                                   rounds * frames_per_write * recv_frame, relay_pid)
    sent = pairs * rounds * frames_per_write * per_frame
    got = sum(n // recv_frame * per_frame for n in got_bytes)
    return {"pairs": pairs, "batch": batch, "sent": sent, "delivered": got, "seconds": elapsed,
            "pps": got / elapsed, "gbps": got * PKT * 8 / elapsed / 1e9,
            "drop_pct": 100.0 * (sent - got) / sent, "relay_cpu_pct": 100.0 * cpu / elapsed,
            "pps_per_relay_cpu_second": got / max(cpu, 1e-9), "us_per_packet": cpu / max(got, 1) * 1e6}


def _derp_bench():
    """bench/packet_relay.py as a module (its name would shadow the packet_relay package on import)."""
    spec = importlib.util.spec_from_file_location("bench_packet_relay", os.path.join(ROOT, "bench", "packet_relay.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cost_rows(derp: list[dict], iroh: list[dict], iroh_batch: list[dict]) -> str:
    out = ["| path | pairs | datagrams/s delivered | dropped | relay CPU per datagram |", "|---|---:|---:|---:|---:|"]
    for name, rows in (("DERP (Upgrade: DERP, TLS)", derp), ("iroh (WebSocket /relay, TLS)", iroh),
                       (f"iroh, batches of {BATCH_SEGMENTS} (type 5)", iroh_batch)):
        for x in rows:
            us = x.get("us_per_packet") or 1e6 / max(x["pps_per_relay_cpu_second"], 1e-9)
            out.append(f"| {name} | {x['pairs']} | {x['pps']:,.0f} | {x['drop_pct']:.1f}% | {us:.1f} µs |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller counts (CI smoke run)")
    p.add_argument("--json", help="also write the raw results here")
    args = p.parse_args()
    derp_bench = _derp_bench()
    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > 1:
        os.sched_setaffinity(0, {1})
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    total = 30_000 if args.quick else 120_000
    with tempfile.TemporaryDirectory() as tmp:
        relay, port = derp_bench.start_relay(tmp, 0)
        try:
            results = {
                "derp": [derp_bench.forwarding(port, ctx, n, total, relay.pid) for n in (1, 4)],
                "iroh": [iroh_forwarding(port, ctx, n, total, relay.pid) for n in (1, 4)],
                "iroh_batch": [iroh_forwarding(port, ctx, n, total, relay.pid, batch=True) for n in (1, 4)],
            }
        finally:
            relay.terminate()
            relay.wait(10)
    print(cost_rows(results["derp"], results["iroh"], results["iroh_batch"]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
