"""Drive real iroh endpoints (PyPI `iroh`) against a relay; run ONLY inside a private netns.

    python iroh_peer.py pair RELAY_URL NBYTES     two endpoints exchange NBYTES each way via the relay
    python iroh_peer.py online RELAY_URL SECONDS [--secret HEX] [--token T]
                                                  does one endpoint come online (home relay) in time?
    python iroh_peer.py dial RELAY_URL SECONDS    B online, A dials B (control); then, after a line on
                                                  stdin (the caller stops the relay meanwhile), a fresh
                                                  endpoint dials B relay-only and must fail in time

Prints one JSON object on stdout; exit status 0 means the scenario behaved as printed.
Endpoints use preset_minimal() (no discovery, no n0 servers) and the given relay only.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import time

import iroh

ALPN = b"burrow/iroh-test/1"


def _options(relay_url: str, protocols=None, secret: bytes | None = None,
             token: str | None = None) -> iroh.EndpointOptions:
    relays = iroh.RelayMap.empty()
    relays.insert(iroh.RelayConfig(url=relay_url, quic_port=None, auth_token=token))
    kwargs = dict(preset=iroh.preset_minimal(), bind_addr="127.0.0.1:0",
                  relay_mode=iroh.RelayMode.custom(relays), alpns=[ALPN])
    if protocols:
        kwargs["protocols"] = protocols
    if secret is not None:
        kwargs["secret_key"] = secret
    return iroh.EndpointOptions(**kwargs)


class Echo(iroh.ProtocolHandler):
    """Reads everything the dialler sends, then answers with its own block and the digest seen."""

    def __init__(self, reply: bytes, done: asyncio.Future):
        self.reply = reply
        self.done = done

    async def accept(self, conn):
        bi = await conn.accept_bi()
        data = await bi.recv().read_to_end(64 * 1024 * 1024)
        await bi.send().write_all(self.reply)
        await bi.send().finish()
        if not self.done.done():
            self.done.set_result(hashlib.sha256(data).hexdigest())
        await conn.closed()

    async def shutdown(self):
        return None


class EchoCreator(iroh.ProtocolCreator):
    def __init__(self, handler):
        self.handler = handler

    def create(self, endpoint):
        return self.handler


async def pair(relay_url: str, nbytes: int) -> dict:
    a_data, b_data = os.urandom(nbytes), os.urandom(nbytes)
    received: asyncio.Future = asyncio.get_running_loop().create_future()
    handler = Echo(b_data, received)
    b = await iroh.Endpoint.bind(_options(relay_url, {ALPN: EchoCreator(handler)}))
    a = await iroh.Endpoint.bind(_options(relay_url))
    try:
        await asyncio.wait_for(asyncio.gather(a.online(), b.online()), 20)
        addr = iroh.EndpointAddr(b.id(), relay_url, [])
        started = time.monotonic()
        conn = await asyncio.wait_for(a.connect(addr, ALPN), 20)
        bi = await conn.open_bi()
        await bi.send().write_all(a_data)
        await bi.send().finish()
        back = await asyncio.wait_for(bi.recv().read_to_end(64 * 1024 * 1024), 60)
        seen_by_b = await asyncio.wait_for(received, 30)
        paths = [{"relay": p.is_relay(), "selected": p.is_selected()} if callable(getattr(p, "is_relay", None))
                 else {"relay": p.is_relay, "selected": p.is_selected} for p in conn.paths()]
        conn.close(0, b"done")
        return {"ok": seen_by_b == hashlib.sha256(a_data).hexdigest()
                and hashlib.sha256(back).hexdigest() == hashlib.sha256(b_data).hexdigest(),
                "bytes_each_way": nbytes, "seconds": round(time.monotonic() - started, 3), "paths": paths}
    finally:
        await a.close()
        await b.close()


async def online(relay_url: str, seconds: float, secret: bytes | None, token: str | None) -> dict:
    ep = await iroh.Endpoint.bind(_options(relay_url, secret=secret, token=token))
    try:
        try:
            await asyncio.wait_for(ep.online(), seconds)
            return {"online": True, "id": str(ep.id())}
        except TimeoutError:
            return {"online": False, "id": str(ep.id())}
    finally:
        await ep.close()


class Hold(iroh.ProtocolHandler):
    """Accepts connections and keeps them until the peer closes."""

    async def accept(self, conn):
        await conn.closed()

    async def shutdown(self):
        return None


async def _try_connect(ep, addr, seconds: float) -> tuple[str, float]:
    started = time.monotonic()
    try:
        conn = await asyncio.wait_for(ep.connect(addr, ALPN), seconds)
        conn.close(0, b"bye")
        outcome = "connected"
    except TimeoutError:
        outcome = "timeout"
    except Exception as exc:  # noqa: BLE001 - iroh.IrohError: the failure a dead relay should give
        outcome = f"error: {type(exc).__name__}: {str(exc)[:200]}"
    return outcome, round(time.monotonic() - started, 3)


async def dial(relay_url: str, seconds: float) -> dict:
    b = await iroh.Endpoint.bind(_options(relay_url, {ALPN: EchoCreator(Hold())}))
    a = await iroh.Endpoint.bind(_options(relay_url))
    result: dict = {}
    try:
        await asyncio.wait_for(asyncio.gather(a.online(), b.online()), 20)
        addr = iroh.EndpointAddr(b.id(), relay_url, [])
        result["control"], result["control_seconds"] = await _try_connect(a, addr, seconds)
        print(json.dumps({"phase": "stop the relay now"}), flush=True)
        await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline), 60)
        c = await iroh.Endpoint.bind(_options(relay_url))
        try:
            result["outcome"], result["seconds"] = await _try_connect(c, addr, seconds)
        finally:
            await c.close()
    finally:
        await a.close()
        await b.close()
    return result


async def _main(argv: list[str]) -> int:
    iroh.iroh_ffi.uniffi_set_event_loop(asyncio.get_running_loop())
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["pair", "online", "dial"])
    p.add_argument("relay_url")
    p.add_argument("arg")
    p.add_argument("--secret", help="32-byte secret key, hex (online)")
    p.add_argument("--token", help="bearer token for the relay (online)")
    args = p.parse_args(argv)
    if args.mode == "pair":
        result = await pair(args.relay_url, int(args.arg))
    elif args.mode == "online":
        secret = bytes.fromhex(args.secret) if args.secret else None
        result = await online(args.relay_url, float(args.arg), secret, args.token)
    else:
        result = await dial(args.relay_url, float(args.arg))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1:])))
