"""`burrow relay-probe URL`: check a relay end to end, for operators.

Steps: TLS + DERP handshake for two fresh keys, a packet round trip A -> B -> A through the relay
(latency), a Ping/Pong with the relay, the same for the iroh relay protocol (GET /ping, two
endpoints log in at /relay, datagrams A -> B -> A, Ping/Pong; client/apps/iroh_probe.py), and a STUN
Binding request to the relay host (our mapped address). Prints one line per step; exit status 0 only if every step passed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import ssl
import statistics
import sys
import time
from urllib.parse import urlsplit

from burrow.client.derp.client import DerpClient
from burrow.client.options import CERT_FIX, ClientParser, VersionAction

try:  # the relay's own STUN codec (wire/stun.py)
    from burrow.wire.stun import build_binding_request, parse_binding_response
except ImportError:  # pragma: no cover - only when the STUN module is absent
    build_binding_request = parse_binding_response = None


def _relay_url(text: str) -> str:
    if urlsplit(text).scheme not in ("https", "http") or not urlsplit(text).hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an https:// or http:// URL")
    return text


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = ClientParser(prog="burrow relay-probe", description=__doc__.splitlines()[0])
    p.add_argument("url", type=_relay_url, help="relay URL, e.g. https://relay.example.com:8443")
    p.add_argument("--version", action=VersionAction)
    p.add_argument("--ca-file", help="trust this CA (or self-signed) certificate file (default: the system's CAs)")
    p.add_argument("--insecure", action="store_true", help="skip certificate verification (testing only; "
                                                               "default: off)")
    p.add_argument("--websocket", action="store_true", help="use DERP over WebSocket instead of Upgrade: DERP "
                                                                "(default: off)")
    p.add_argument("--stun-port", type=int, default=3478, help="UDP STUN port on the relay host (0 = skip; "
                                                                "default: 3478)")
    p.add_argument("--stun-host", help="STUN host (default: the relay URL's host)")
    p.add_argument("--count", type=int, default=5, help="packet round trips to time (default: 5)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds allowed for each step (default: 5)")
    p.add_argument("--no-iroh", action="store_true", help="skip the iroh relay protocol checks (default: off)")
    p.add_argument("--iroh-token", help="bearer token for the iroh path, if the relay requires one "
                                        "(default: none)")
    return p.parse_args(argv)


async def stun_probe(host: str, port: int, timeout: float) -> tuple[str, int, float]:
    """One RFC 5389 Binding request over UDP; returns (mapped ip, mapped port, rtt)."""
    if build_binding_request is None:
        raise RuntimeError("STUN codec not available")
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.setblocking(False)
    try:
        txid = os.urandom(12)
        t0 = time.monotonic()
        await loop.sock_sendto(sock, build_binding_request(txid, "burrow-probe"), addr)
        while True:
            data, _src = await asyncio.wait_for(loop.sock_recvfrom(sock, 2048), timeout)
            try:
                ip, mapped_port = parse_binding_response(data, txid)
            except Exception:  # noqa: BLE001 - a stray datagram; keep waiting until the timeout
                continue
            return ip, mapped_port, time.monotonic() - t0
    finally:
        sock.close()


async def probe(args: argparse.Namespace, out=sys.stdout) -> int:
    failures = 0

    def say(ok: bool, step: str, detail: str) -> None:
        nonlocal failures
        failures += 0 if ok else 1
        print(f"{'ok  ' if ok else 'FAIL'} {step:<10} {detail}", file=out, flush=True)

    opts = dict(ca_file=args.ca_file, insecure=args.insecure, websocket=args.websocket,
                reconnect=False, connect_timeout=args.timeout, app_name="burrow-probe")
    a, b = DerpClient(args.url, **opts), DerpClient(args.url, **opts)
    try:
        t0 = time.monotonic()
        await a.start()
        connect_ms = (time.monotonic() - t0) * 1000
        await b.start()
        say(True, "handshake", f"TLS+DERP in {connect_ms:.1f} ms, server nodekey:{a.server_key.hex()}")
    except Exception as exc:  # noqa: BLE001 - report any failure as a probe failure
        fix = CERT_FIX if isinstance(exc, ssl.SSLCertVerificationError) else ""
        say(False, "handshake", f"{type(exc).__name__}: {exc}{fix}")
        await a.close()
        await b.close()
        return 1
    try:
        rtts = []
        for i in range(max(1, args.count)):
            payload = b"burrow-probe %d " % i + os.urandom(16)
            t0 = time.monotonic()
            await a.send(b.public_key, payload)
            src, got = await b.recv(args.timeout)
            if src != a.public_key or got != payload:
                raise RuntimeError("B received a different packet")
            await b.send(a.public_key, got)
            src, back = await a.recv(args.timeout)
            if src != b.public_key or back != payload:
                raise RuntimeError("A received a different packet")
            rtts.append((time.monotonic() - t0) * 1000)
        say(True, "packets", f"{len(rtts)} round trips A->B->A, median {statistics.median(rtts):.2f} ms, "
                             f"max {max(rtts):.2f} ms")
    except Exception as exc:  # noqa: BLE001
        say(False, "packets", f"{type(exc).__name__}: {exc}")
    try:
        rtt = await a.ping(args.timeout)
        say(True, "ping", f"relay Ping/Pong {rtt * 1000:.2f} ms")
    except Exception as exc:  # noqa: BLE001
        say(False, "ping", f"{type(exc).__name__}: {exc}")
    await a.close()
    await b.close()
    if not args.no_iroh:
        from burrow.client.apps.iroh_probe import probe_iroh  # counts its failures through say()

        await probe_iroh(args.url, say, ca_file=args.ca_file, insecure=args.insecure, count=args.count,
                         timeout=args.timeout, token=args.iroh_token)
    if args.stun_port:
        host = args.stun_host or urlsplit(args.url).hostname or "127.0.0.1"
        try:
            ip, port, rtt = await stun_probe(host, args.stun_port, args.timeout)
            say(True, "stun", f"mapped address {ip}:{port} in {rtt * 1000:.2f} ms")
        except Exception as exc:  # noqa: BLE001
            say(False, "stun", f"{type(exc).__name__ if str(exc) else 'no answer'}: {exc or 'timeout'}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return asyncio.run(probe(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
