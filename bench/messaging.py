#!/usr/bin/env python3
"""Messaging (Skywire's protocol) forwarding cost next to the DERP path of the same burrow-relay, same machine.

Each relay runs as `python -m burrow.packet_relay` with DERP on plain HTTP and HTTPS and the messaging
port on, pinned to core 0 (taskset); this process drives it from core 1 with blocking sockets, one
thread each, as bench/packet_relay.py does for DERP. Senders write batches of 64 frames; receivers count
delivered bytes. The cost figure is the relay's CPU time (user+system) per delivered message.

  messaging     Send frames on open Noise KK channels (one channel per pair), plain TCP as the specification says;
                the ciphertexts are real (encrypted by the sender's channel) and the batch repeats
  derp          SendPacket frames over `Upgrade: DERP` on plain HTTP (the like-for-like yardstick)
  derp+tls      the same over HTTPS, as bench/packet_relay.py measures it
  cross-server  sender and receiver delegated to two relays: the sender links to the receiver's relay
                (the protocol has no server-to-server hop), so one relay forwards; both relays' CPU is shown
  library       MessagingClient end to end (encrypt, send, receive, decrypt in this process): messages/s

Usage: .venv/bin/python bench/messaging.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository: harness/

from packet_relay_load import pump  # noqa: E402

from burrow.client.messaging.link import ServerLink  # noqa: E402
from burrow.messaging import frames as mf  # noqa: E402
from burrow.messaging import keys  # noqa: E402
from burrow.messaging.client_link import ChannelReady, ClientLink, IncomingChannel  # noqa: E402
from burrow.messaging.handshake import InitiatorHandshake  # noqa: E402
from burrow.wire.derp import frames as df  # noqa: E402
from burrow.wire.derp.connection import ClientConnection, Connected  # noqa: E402
from burrow.wire.derp.handshake import generate_private_key  # noqa: E402
from harness import messaging as hm  # noqa: E402
from harness.ports import free_port  # noqa: E402

BATCH = 64
UPGRADE = b"GET /derp HTTP/1.1\r\nHost: bench\r\nUpgrade: DERP\r\nConnection: Upgrade\r\n\r\n"


class Relay:
    def __init__(self, proc, http: int, https: int, messaging: int, key: bytes) -> None:
        self.proc, self.http, self.https, self.messaging, self.key = proc, http, https, messaging, key

    def cpu(self) -> float:
        return sum(psutil.Process(self.proc.pid).cpu_times()[:2])

    def stop(self) -> None:
        self.proc.stop()


def start_relay(tmp: str, name: str, core: int = 0) -> Relay:
    """burrow-relay with DERP on HTTP and HTTPS and messaging on, pinned to `core` when taskset exists."""
    http = free_port()
    prefix = ("taskset", "-c", str(core)) if shutil.which("taskset") else ()
    proc, addr = hm.relay(Path(tmp), name, None, 20.0, "--dev-tls", "--tls-dir", f"{tmp}/tls-{name}",
                          "--https-port", "0", "--http-port", str(http), prefix=prefix)
    deadline = time.time() + 30
    while not (m := re.search(r"relay up: https (\d+)", proc.output())):
        if time.time() > deadline:
            proc.stop()
            raise SystemExit(f"relay {name} did not start: {proc.output()}")
        time.sleep(0.05)
    key_hex, _, host_port = addr.partition("@")
    return Relay(proc, http, int(m.group(1)), int(host_port.rpartition(":")[2]), bytes.fromhex(key_hex))


# ---- messaging: blocking links with one open channel per pair
def _link(port: int, server_key: bytes) -> tuple[socket.socket, ClientLink]:
    secret = keys.SecretKey.generate()
    sock = socket.create_connection(("127.0.0.1", port))
    hs = InitiatorHandshake(secret, server_key)
    sock.sendall(hs.start())
    while not hs.complete:
        sock.sendall(hs.receive_data(sock.recv(65536)))
    machine = ClientLink(secret)
    machine.receive_data(hs.rest)
    return sock, machine


def _until(sock: socket.socket, machine: ClientLink, kind) -> object:
    while True:
        for ev in machine.receive_data(sock.recv(65536)):
            if type(ev) is kind:
                return ev


def messaging_pairs(sender_relay: Relay, receiver_relay: Relay, pairs: int, size: int):
    """(sender sockets, receiver sockets, blobs, frame length) with one open channel per pair."""
    senders, receivers, blobs = [], [], []
    idle = []  # cross-server: each sender also holds the link to its own (delegated) relay
    for _ in range(pairs):
        if sender_relay is not receiver_relay:
            idle.append(_link(sender_relay.messaging, sender_relay.key)[0])
        rsock, rm = _link(receiver_relay.messaging, receiver_relay.key)
        ssock, sm = _link(receiver_relay.messaging, receiver_relay.key)  # the sender links to the receiver's relay
        cid = sm.open_channel(rm.local.public)
        ssock.sendall(sm.data_to_send())
        _until(rsock, rm, IncomingChannel)
        rsock.sendall(rm.data_to_send())
        _until(ssock, sm, ChannelReady)
        payload = os.urandom(size)
        for _ in range(BATCH):
            sm.send(cid, payload)
        blobs.append(sm.data_to_send())
        senders.append(ssock)
        receivers.append(rsock)
    return senders, receivers, blobs, mf.HEADER_LEN + mf.SEND_OVERHEAD + size + mf.TAG_LEN, idle


# ---- DERP: plain HTTP or TLS
def _derp(port: int, tls: bool) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", port))
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        sock = ctx.wrap_socket(sock, server_hostname="localhost")
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


def derp_pairs(relay: Relay, pairs: int, size: int, tls: bool):
    port = relay.https if tls else relay.http
    conns = [_derp(port, tls) for _ in range(2 * pairs)]
    senders, receivers = conns[:pairs], conns[pairs:]
    payload = os.urandom(size)
    blobs = [(df.header(df.SEND_PACKET, 32 + size) + key + payload) * BATCH for _, key in receivers]
    return [s for s, _ in senders], [r for r, _ in receivers], blobs, df.FRAME_HEADER_LEN + 32 + size


def forwarding(kind: str, relays: list[Relay], pairs: int, size: int, total: int) -> dict:
    rounds = max(1, total // pairs // BATCH)
    idle = []
    if kind == "messaging":
        senders, receivers, blobs, flen, idle = messaging_pairs(relays[0], relays[0], pairs, size)
    elif kind == "cross-server":
        senders, receivers, blobs, flen, idle = messaging_pairs(relays[0], relays[1], pairs, size)
    else:
        senders, receivers, blobs, flen = derp_pairs(relays[0], pairs, size, tls=kind == "derp+tls")
    cpu0 = [r.cpu() for r in relays]
    # messaging never drops (back-pressure instead), so a receiver may wait longer than DERP's 1 s
    patience = 1.0 if kind.startswith("derp") else 10.0
    got, elapsed, _ = pump(senders, receivers, blobs, rounds, rounds * BATCH * flen, relays[-1].proc.pid, patience)
    cpu = [r.cpu() - c for r, c in zip(relays, cpu0, strict=True)]
    for sock in idle:
        sock.close()
    sent, delivered = pairs * rounds * BATCH, sum(n // flen for n in got)
    forwarding_cpu = cpu[-1] if kind == "cross-server" else cpu[0]
    return {"kind": kind, "pairs": pairs, "size": size, "sent": sent, "delivered": delivered,
            "seconds": elapsed, "per_second": delivered / elapsed, "relay_cpu_s": cpu,
            "us_per_message": 1e6 * forwarding_cpu / max(delivered, 1)}


async def library(relay: Relay, count: int, size: int) -> dict:
    """MessagingClient's own channel path: a ServerLink each, Noise in this process."""
    incoming = asyncio.Queue()
    a = ServerLink(keys.SecretKey.generate(), relay.key, f"127.0.0.1:{relay.messaging}", lambda c: None,
                   lambda link: None)
    b = ServerLink(keys.SecretKey.generate(), relay.key, f"127.0.0.1:{relay.messaging}", incoming.put_nowait,
                   lambda link: None)
    await a.connect()
    await b.connect()
    ch = await a.open(b.local.public)
    inc = await incoming.get()
    payload = os.urandom(size)

    async def receive() -> None:
        for _ in range(count):
            await inc.recv()

    t0 = time.perf_counter()
    task = asyncio.create_task(receive())
    for _ in range(count):
        await ch.send(payload)
    await task
    elapsed = time.perf_counter() - t0
    await a.close()
    await b.close()
    return {"size": size, "messages": count, "per_second": count / elapsed}


def run(args) -> dict:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    total = 30_000 if args.quick else 120_000
    results: dict = {"forwarding": [], "sizes": [], "cross": [], "library": []}
    with tempfile.TemporaryDirectory() as tmp:
        r1 = start_relay(tmp, "r1", core=0)
        r2 = start_relay(tmp, "r2", core=0)
        try:
            for pairs in (1, 4, 16):
                for kind in ("messaging", "derp", "derp+tls"):
                    results["forwarding"].append(forwarding(kind, [r1], pairs, 1200, total))
            for size in (64, 16384):
                for kind in ("messaging", "derp"):
                    results["sizes"].append(forwarding(kind, [r1], 4, size, total // (4 if size > 4096 else 1)))
            results["cross"].append(forwarding("cross-server", [r1, r2], 1, 1200, total))
            count = 5000 if args.quick else 20000
            results["library"].append(asyncio.run(library(r1, count, 1200)))
        finally:
            r1.stop()
            r2.stop()
    return results


def table(r: dict) -> str:
    out = ["| path | pairs | payload | messages/s | delivered | relay CPU per message | vs DERP (plain) |",
           "|---|---|---|---|---|---|---|"]
    rows = r["forwarding"] + r["sizes"]
    for x in rows:
        derp = next((d for d in rows if d["kind"] == "derp" and d["pairs"] == x["pairs"]
                     and d["size"] == x["size"]), None)
        ratio = f"{x['us_per_message'] / derp['us_per_message']:.2f}x" if derp and x["kind"] != "derp" else ""
        out.append(f"| {x['kind']} | {x['pairs']} | {x['size']} B | {x['per_second']:,.0f} | "
                   f"{100 * x['delivered'] / x['sent']:.1f}% | {x['us_per_message']:.2f} µs | {ratio} |")
    for x in r["cross"]:
        cpu = ", ".join(f"{c:.2f} s" for c in x["relay_cpu_s"])
        out.append(f"| cross-server (relay CPU: sender's relay, receiver's relay = {cpu}) | {x['pairs']} | "
                   f"{x['size']} B | {x['per_second']:,.0f} | {100 * x['delivered'] / x['sent']:.1f}% | "
                   f"{x['us_per_message']:.2f} µs | |")
    for x in r["library"]:
        out.append(f"| library (MessagingClient, Noise in the benchmark process) | 1 | {x['size']} B | "
                   f"{x['per_second']:,.0f} | 100% | | |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller counts (CI smoke run)")
    p.add_argument("--json", help="also write the raw results here")
    args = p.parse_args()
    results = run(args)
    print(table(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
