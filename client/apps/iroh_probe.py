"""The iroh half of `burrow relay-probe`: GET /ping, two endpoints log in, datagrams A -> B -> A, Ping.

`probe_iroh(url, say, ...)` reports each step through `say(ok, step, detail)` (the DERP probe's
printer) and returns the number of failed steps.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import statistics
import time
import urllib.request
from collections.abc import Callable

from burrow.client.iroh.client import IrohRelayClient


def client_ssl_context(url: str, ca_file: str | None, insecure: bool) -> ssl.SSLContext | None:
    if not url.startswith("https"):
        return None
    ctx = ssl.create_default_context(cafile=ca_file)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _ping(url: str, ctx: ssl.SSLContext | None, timeout: float) -> int:
    with urllib.request.urlopen(url.rstrip("/") + "/ping", timeout=timeout, context=ctx) as resp:
        return resp.status


async def probe_iroh(url: str, say: Callable[[bool, str, str], None], *, ca_file: str | None = None,
                     insecure: bool = False, count: int = 5, timeout: float = 5.0,
                     token: str | None = None) -> int:
    failures = 0

    def step(ok: bool, name: str, detail: str) -> None:
        nonlocal failures
        failures += 0 if ok else 1
        say(ok, name, detail)

    ctx = client_ssl_context(url, ca_file, insecure)
    try:
        t0 = time.monotonic()
        status = await asyncio.wait_for(asyncio.to_thread(_ping, url, ctx, timeout), timeout + 1)
        ms = (time.monotonic() - t0) * 1000
        step(200 <= status < 300, "iroh-http", f"GET /ping -> {status} in {ms:.1f} ms")
    except Exception as exc:  # noqa: BLE001 - any failure is a probe failure
        step(False, "iroh-http", f"{type(exc).__name__}: {exc}")
    a = IrohRelayClient(url, token=token, ssl_context=ctx)
    b = IrohRelayClient(url, token=token, ssl_context=ctx)
    try:
        t0 = time.monotonic()
        await a.connect(timeout)
        ms = (time.monotonic() - t0) * 1000
        await b.connect(timeout)
        step(True, "iroh-login", f"WebSocket + challenge login ({a.version}) in {ms:.1f} ms")
    except Exception as exc:  # noqa: BLE001
        step(False, "iroh-login", f"{type(exc).__name__}: {exc}")
        await a.close()
        await b.close()
        return failures
    try:
        rtts = []
        for i in range(max(1, count)):
            payload = b"burrow-probe %d " % i + os.urandom(16)
            t0 = time.monotonic()
            await a.send(b.endpoint_id, payload)
            got = await b.recv(timeout)
            if got.peer != a.endpoint_id or got.body[1:] != payload:
                raise RuntimeError("B received a different datagram")
            await b.send(a.endpoint_id, payload)
            back = await a.recv(timeout)
            if back.peer != b.endpoint_id or back.body[1:] != payload:
                raise RuntimeError("A received a different datagram")
            rtts.append((time.monotonic() - t0) * 1000)
        step(True, "iroh-data", f"{len(rtts)} round trips A->B->A, median {statistics.median(rtts):.2f} ms, "
                                f"max {max(rtts):.2f} ms")
    except Exception as exc:  # noqa: BLE001
        step(False, "iroh-data", f"{type(exc).__name__}: {exc}")
    try:
        rtt = await a.ping(timeout)
        step(True, "iroh-ping", f"relay Ping/Pong {rtt * 1000:.2f} ms")
    except Exception as exc:  # noqa: BLE001
        step(False, "iroh-ping", f"{type(exc).__name__}: {exc}")
    await a.close()
    await b.close()
    return failures
