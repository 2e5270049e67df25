"""Dilation test and bench pieces: the blob app protocol, a magic-wormhole 0.24 peer process, cutting proxies.

Blob protocol on a subchannel: an 8-byte big-endian length, that many bytes, then the receiver answers the
64 hex digits of their SHA-256 and closes (the same as tests/interop/mw_dilation_peer.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import struct
import sys
from pathlib import Path

PEER = Path(__file__).resolve().parents[1] / "tests" / "interop" / "mw_dilation_peer.py"
BLOCK = os.urandom(1024 * 1024)
CHUNK = bytes(range(256)) * 1024  # 256 KiB
MAX_CHUNKS = 2000  # the paced sender's bound (500 MB)


async def paced_until(da, db, moved) -> tuple[str, str]:
    """Leader to Follower on a "paced" subchannel of two dilated peers, 256 KiB at a time, until `moved()`
    holds (bounded), then 32 chunks more: (SHA-256 of what was sent, SHA-256 of what the Follower read)."""
    leader, follower = (da, db) if da.leader else (db, da)
    listener = follower.listen("paced")
    (_r, w), (fr, _fw) = await asyncio.gather(leader.open("paced"), listener.accept())
    sent = hashlib.sha256()

    async def sink() -> str:
        h = hashlib.sha256()
        while chunk := await fr.read(1 << 20):
            h.update(chunk)
        return h.hexdigest()

    got = asyncio.ensure_future(sink())
    extra = None
    for _ in range(MAX_CHUNKS):
        w.write(CHUNK)
        sent.update(CHUNK)
        await w.drain()
        await asyncio.sleep(0.002)
        if extra is None and moved():
            extra = 32
        elif extra is not None:
            extra -= 1
            if extra == 0:
                break
    w.close()
    return sent.hexdigest(), await asyncio.wait_for(got, 120)


async def send_blob(reader, writer, size: int, verify: bool = True) -> tuple[str, str]:
    """-> (sha256 of what we sent, the digest the peer answered); all zeros without `verify` (bench)."""
    h = hashlib.sha256() if verify else None
    writer.write(struct.pack(">Q", size))
    left = size
    while left > 0:
        chunk = BLOCK[: min(left, len(BLOCK))]
        if h:
            h.update(chunk)
        writer.write(chunk)
        left -= len(chunk)
        await writer.drain()
    answer = await reader.readexactly(64)
    writer.close()
    return (h.hexdigest() if h else "0" * 64), answer.decode()


async def sink_blob(reader, writer, verify: bool = True) -> tuple[int, str]:
    (size,) = struct.unpack(">Q", await reader.readexactly(8))
    h, got = (hashlib.sha256() if verify else None), 0
    while got < size:
        chunk = await reader.read(min(1 << 20, size - got))
        if not chunk:
            raise EOFError(f"stream ended after {got} of {size} bytes")
        if h:
            h.update(chunk)
        got += len(chunk)
    digest = h.hexdigest() if h else "0" * 64
    writer.write(digest.encode())
    writer.close()
    return got, digest


class Peer:
    """magic-wormhole 0.24 in a subprocess, speaking line events on stdout."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.lines: list[str] = []

    @classmethod
    async def start(cls, relay_url: str, transit: str, *args: str) -> Peer:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(PEER), relay_url, transit, *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        return cls(proc)

    async def expect(self, prefix: str, timeout: float = 60.0) -> list[str]:
        for line in self.lines:
            if line.startswith(prefix):
                self.lines.remove(line)
                return line.split()
        while True:
            raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
            if not raw:
                raise EOFError(f"peer exited before {prefix!r}; saw {self.lines}")
            line = raw.decode().strip()
            if line.startswith(prefix):
                return line.split()
            self.lines.append(line)

    async def finish(self, timeout: float = 30.0) -> int:
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()


class CuttingProxy:
    """A TCP proxy (127.0.0.1, ephemeral port) in front of a transit relay that aborts every connection
    `cut_after` seconds after it was accepted; `cuts` counts the aborted connections. `max_rate` (bytes/s per
    direction and connection) slows it down so that a transfer surely spans several cuts."""

    def __init__(self, target_port: int, cut_after: float = 2.0, max_rate: float | None = None):
        self.target_port = target_port
        self.cut_after = cut_after
        self.max_rate = max_rate
        self.cuts = 0
        self.connections = 0
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self.port = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    @property
    def location(self) -> str:
        return f"tcp:127.0.0.1:{self.port}"

    async def _dial_target(self, cw: asyncio.StreamWriter):
        """Count the accepted connection and open its twin to the target; None (client dropped) if that fails."""
        self.connections += 1
        try:
            return await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            cw.transport.abort()
            return None

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        if (target := await self._dial_target(cw)) is None:
            return
        sr, sw = target

        async def pipe(r, w):
            try:
                while data := await r.read(256 * 1024):
                    w.write(data)
                    await w.drain()
                    if self.max_rate:
                        await asyncio.sleep(len(data) / self.max_rate)
            except (ConnectionError, OSError):
                pass
            finally:
                w.transport.abort()

        t = asyncio.ensure_future(asyncio.wait_for(asyncio.gather(pipe(cr, sw), pipe(sr, cw)), self.cut_after))
        self._tasks.add(t)
        try:
            await t
        except TimeoutError:
            self.cuts += 1
        except asyncio.CancelledError:
            pass
        finally:
            self._tasks.discard(t)
            cw.transport.abort()
            sw.transport.abort()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()


class FreezingProxy(CuttingProxy):
    """Like CuttingProxy without the timer: `freeze()` silently stops forwarding on every current connection
    (the sockets stay open, as with a dead NAT mapping); new connections work normally."""

    def __init__(self, target_port: int):
        super().__init__(target_port, cut_after=3600.0)
        self._frozen: list[asyncio.Event] = []

    def freeze(self) -> None:
        for ev in self._frozen:
            ev.set()

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        if (target := await self._dial_target(cw)) is None:
            return
        sr, sw = target
        frozen = asyncio.Event()
        self._frozen.append(frozen)
        me = asyncio.current_task()
        self._tasks.add(me)

        async def pipe(r, w):
            while not frozen.is_set():
                data = await r.read(256 * 1024)
                if not data or frozen.is_set():
                    break
                w.write(data)
                await w.drain()

        try:
            await asyncio.gather(pipe(cr, sw), pipe(sr, cw))
            await frozen.wait()
            await asyncio.sleep(3600)
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(me)
            cw.transport.abort()
            sw.transport.abort()
