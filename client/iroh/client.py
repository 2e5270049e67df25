"""A small asyncio iroh relay client (tests, `burrow relay-probe`, the benchmark).

Speaks the client side of the iroh relay protocol over the `websockets` library: GET /relay with
`Sec-WebSocket-Protocol: iroh-relay-v2, iroh-relay-v1`, the challenge login with an Ed25519 key,
then datagram frames by endpoint id. Real iroh endpoints are tested separately (tests/interop).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time

from nacl.signing import SigningKey
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from burrow.wire.iroh import frames as f
from burrow.wire.iroh.handshake import SUBPROTOCOLS, challenge_message

RECV_QUEUE = 4096


class IrohRelayError(Exception):
    pass


class IrohRelayDenied(IrohRelayError):
    def __init__(self, reason: str) -> None:
        super().__init__(f"relay denied authentication: {reason}")
        self.reason = reason


class IrohRelayClient:
    def __init__(self, url: str, key: SigningKey | None = None, *, token: str | None = None,
                 ssl_context: ssl.SSLContext | None = None, subprotocols: tuple[str, ...] = SUBPROTOCOLS,
                 answer_pings: bool = True) -> None:
        base = url.rstrip("/")
        if base.startswith("http"):
            base = "ws" + base[4:]
        self.url = base + "/relay"
        self.key = key or SigningKey.generate()
        self.token = token
        self.ssl_context = ssl_context
        self.subprotocols = subprotocols
        self.answer_pings = answer_pings
        self.version: str | None = None
        self.ws = None
        self.frames: asyncio.Queue = asyncio.Queue(RECV_QUEUE)
        self._pongs: dict[bytes, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None
        self.closed = asyncio.Event()

    @property
    def endpoint_id(self) -> bytes:
        return bytes(self.key.verify_key)

    async def connect(self, timeout: float = 10.0) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        self.ws = await asyncio.wait_for(connect(
            self.url, subprotocols=list(self.subprotocols), additional_headers=headers, ssl=self.ssl_context,
            max_size=f.MAX_FRAME_SIZE, compression=None, ping_interval=None, open_timeout=timeout), timeout)
        self.version = self.ws.subprotocol
        first = f.decode(await asyncio.wait_for(self.ws.recv(), timeout))
        if isinstance(first, f.ServerChallenge):
            sig = self.key.sign(challenge_message(first.challenge)).signature
            await self.ws.send(f.ClientAuth(self.endpoint_id, sig).encode())
            first = f.decode(await asyncio.wait_for(self.ws.recv(), timeout))
        if isinstance(first, f.ServerDeniesAuth):
            await self.ws.close()
            raise IrohRelayDenied(first.reason)
        if not isinstance(first, f.ServerConfirmsAuth):
            raise IrohRelayError(f"unexpected handshake frame {first!r}")
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                frame = f.decode(message)
                if isinstance(frame, f.Ping):
                    if self.answer_pings:
                        await self.ws.send(f.Pong(frame.data).encode())
                    self._put(frame)
                elif isinstance(frame, f.Pong) and frame.data in self._pongs:
                    fut = self._pongs.pop(frame.data)
                    if not fut.done():
                        fut.set_result(time.monotonic())
                else:
                    self._put(frame)
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()

    def _put(self, frame) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.frames.put_nowait(frame)

    async def send(self, dst: bytes, data: bytes, ecn: int = 0) -> None:
        await self.ws.send(f.Datagrams(f.CLIENT_TO_RELAY_DATAGRAM, dst, bytes([ecn]) + data).encode())

    async def send_batch(self, dst: bytes, segment_size: int, data: bytes, ecn: int = 0) -> None:
        body = bytes([ecn]) + segment_size.to_bytes(2, "big") + data
        await self.ws.send(f.Datagrams(f.CLIENT_TO_RELAY_DATAGRAM_BATCH, dst, body).encode())

    async def send_raw(self, message: bytes) -> None:
        await self.ws.send(message)

    async def recv(self, timeout: float = 10.0, kind: type | None = f.Datagrams):
        """The next frame of `kind` (others are skipped; None takes any frame)."""
        deadline = time.monotonic() + timeout
        while True:
            frame = await asyncio.wait_for(self.frames.get(), max(0.0, deadline - time.monotonic()))
            if kind is None or isinstance(frame, kind):
                return frame

    async def ping(self, timeout: float = 10.0) -> float:
        data = time.monotonic_ns().to_bytes(8, "big")
        fut = asyncio.get_running_loop().create_future()
        self._pongs[data] = fut
        t0 = time.monotonic()
        await self.ws.send(f.Ping(data).encode())
        try:
            return await asyncio.wait_for(fut, timeout) - t0
        finally:
            self._pongs.pop(data, None)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._reader, 5)
