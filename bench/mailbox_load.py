"""A cheap load generator for the mailbox benchmark: the `websockets` sans-IO client on asyncio.Protocol.

Each pair runs the full client flow of a wormhole exchange (bind, allocate, claim, open, add pake,
version and one data phase each way, release, close) and records add-to-delivery latency: from the
moment one side writes its `add` to the moment the other side reads the `message`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import deque
from typing import Any

from websockets.client import ClientProtocol
from websockets.frames import TEXT
from websockets.http11 import Response
from websockets.uri import parse_uri

STEP_TIMEOUT = 30.0  # seconds to connect
PAIR_TIMEOUT = 60.0  # seconds one pair may take before it counts as failed


class WS(asyncio.Protocol):
    def __init__(self, uri: str) -> None:
        self.ws = ClientProtocol(parse_uri(uri), max_size=None)
        self.transport: asyncio.Transport | None = None
        self.inbox: deque[dict[str, Any]] = deque()
        self.kept: list[dict[str, Any]] = []
        self.waiter: asyncio.Future[None] | None = None
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.ws.send_request(self.ws.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        self.ws.receive_data(data)
        for ev in self.ws.events_received():
            if isinstance(ev, Response):
                if not self.opened.done():
                    if ev.status_code == 101:
                        self.opened.set_result(None)
                    else:
                        self.opened.set_exception(ConnectionError(f"HTTP {ev.status_code}"))
            elif ev.opcode is TEXT or ev.opcode.name == "BINARY":
                self.inbox.append(json.loads(ev.data))
                if self.waiter is not None and not self.waiter.done():
                    self.waiter.set_result(None)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.opened.done():
            self.opened.set_exception(ConnectionError("closed"))
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("closed"))

    def _flush(self) -> None:
        for chunk in self.ws.data_to_send():
            if chunk:
                self.transport.write(chunk)
            else:
                self.transport.close()

    def send(self, **msg: Any) -> None:
        msg.setdefault("id", os.urandom(2).hex())
        self.ws.send_text(json.dumps(msg).encode())
        self._flush()

    async def expect(self, mtype: str) -> dict[str, Any]:
        """Next message of `mtype`; acks are skipped, other replies are kept for a later expect()."""
        for i, msg in enumerate(self.kept):
            if msg["type"] == mtype:
                del self.kept[i]
                return msg
        while True:
            while self.inbox:
                msg = self.inbox.popleft()
                t = msg.get("type")
                if t == mtype:
                    return msg
                if t == "error":
                    raise RuntimeError(f"server error: {msg.get('error')}")
                if t != "ack" and t != "message":
                    self.kept.append(msg)
            if self.closed:
                raise ConnectionError("closed")
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter  # bounded by the per-pair timeout in load()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.ws.send_close(1000)
            self._flush()
            self.transport.close()


async def open_ws(host: str, port: int) -> WS:
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(lambda: WS(f"ws://{host}:{port}/v1"), host, port)
    async with asyncio.timeout(STEP_TIMEOUT):
        await proto.opened
        await proto.expect("welcome")
    return proto


async def _message_from(ws: WS, side: str, phase: str, sent: dict[str, float], latencies: list[float]) -> None:
    while True:
        msg = await ws.expect("message")
        if msg["side"] == side and msg["phase"] == phase:
            latencies.append(time.perf_counter() - sent[phase + side])
            return


async def _pause(think: float) -> None:
    if think > 0:
        await asyncio.sleep(think)


async def run_pair(host: str, port: int, n: int, latencies: list[float], think: float = 0.0,
                   port_b: int | None = None) -> None:
    """One exchange; `think` seconds pass before each client step (code typing, PAKE math) when > 0.
    Side B talks to `port_b` when given (another replica), else to the same server as side A."""
    a = await open_ws(host, port)
    b = await open_ws(host, port_b or port)
    sa, sb = f"a{n:06d}{os.getpid()}", f"b{n:06d}{os.getpid()}"
    sent: dict[str, float] = {}
    try:
        a.send(type="bind", appid="bench", side=sa, client_version=["bench", "1"])
        a.send(type="allocate")
        nameplate = (await a.expect("allocated"))["nameplate"]
        a.send(type="claim", nameplate=nameplate)
        mailbox = (await a.expect("claimed"))["mailbox"]
        a.send(type="open", mailbox=mailbox)
        sent["pake" + sa] = time.perf_counter()
        a.send(type="add", phase="pake", body="aa" * 40)
        await _pause(think)
        b.send(type="bind", appid="bench", side=sb, client_version=["bench", "1"])
        b.send(type="claim", nameplate=nameplate)
        await b.expect("claimed")
        b.send(type="open", mailbox=mailbox)
        for phase, body in (("pake", "bb" * 40), ("version", "cc" * 60), ("0", "dd" * 200)):
            await _pause(think)
            sent[phase + sb] = time.perf_counter()
            b.send(type="add", phase=phase, body=body)
            if phase == "pake":
                a.send(type="release", nameplate=nameplate)
                b.send(type="release", nameplate=nameplate)
            await _message_from(a, sb, phase, sent, latencies)
            if phase != "pake":
                await _pause(think)
                sent[phase + sa] = time.perf_counter()
                a.send(type="add", phase=phase, body=body)
                await _message_from(b, sa, phase, sent, latencies)
        await a.expect("released")
        await b.expect("released")
        await _pause(think)
        a.send(type="close", mailbox=mailbox, mood="happy")
        b.send(type="close", mailbox=mailbox, mood="happy")
        await a.expect("closed")
        await b.expect("closed")
    finally:
        a.close()
        b.close()


async def load(host: str, port: int, concurrency: int, max_pairs: int, max_seconds: float,
               think: float = 0.0, port_b: int | None = None) -> dict[str, Any]:
    latencies: list[float] = []
    done = failed = 0
    counter = iter(range(max_pairs))
    deadline = time.monotonic() + max_seconds

    async def worker() -> None:
        nonlocal done, failed
        for n in counter:
            if time.monotonic() > deadline:
                return
            try:
                async with asyncio.timeout(PAIR_TIMEOUT):
                    await run_pair(host, port, n, latencies, think, port_b)
                done += 1
            except (TimeoutError, OSError, RuntimeError):
                failed += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"pairs": done, "failed": failed, "seconds": time.perf_counter() - t0, "latencies": latencies}


async def hold_idle(host: str, port: int, count: int) -> list[WS]:
    """Open `count` bound, idle connections (for RSS per idle connection)."""
    conns: list[WS] = []
    for i in range(0, count, 50):
        batch = await asyncio.gather(*(open_ws(host, port) for _ in range(min(50, count - i))))
        for j, ws in enumerate(batch):
            ws.send(type="bind", appid="idle", side=f"idle{i + j}")
        conns.extend(batch)
    for ws in conns:
        await ws.expect("ack")
    return conns
