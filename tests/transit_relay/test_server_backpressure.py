"""A reader that stops reading throttles its writer; the relay's own buffering stays bounded."""

import asyncio
import hashlib
import os
import re
import socket
import sys
import time
from pathlib import Path

import psutil
import pytest
import websockets

from tests.transit_relay.conftest import PUMPS, hs, wait_for

CAP = 256 << 20  # what the writer would push if nothing held it back
BLOCK = os.urandom(1 << 20)
ROOT = Path(__file__).resolve().parents[2]


async def push_until_blocked(sock: socket.socket, digest, stall: float = 1.0) -> int:
    """Send until the socket accepts nothing for `stall` seconds (or CAP is reached)."""
    sock.setblocking(False)
    view = memoryview(BLOCK)
    sent, last = 0, time.monotonic()
    while sent < CAP and time.monotonic() - last < stall:
        try:
            off = sent % len(BLOCK)
            n = sock.send(view[off:])
            digest.update(view[off:off + n])
            sent += n
            last = time.monotonic()
        except BlockingIOError:
            await asyncio.sleep(0.02)
    return sent


async def tcp_pair(srv):
    a = socket.create_connection(("127.0.0.1", srv.port))
    b = socket.create_connection(("127.0.0.1", srv.port))
    a.sendall(hs(b"a"))
    await wait_for(lambda: srv.relay.pending)
    b.sendall(hs(b"b"))
    loop = asyncio.get_running_loop()
    for s in (a, b):
        s.setblocking(False)
        assert await loop.sock_recv(s, 3) == b"ok\n"
    return a, b


async def drain(sock: socket.socket, digest) -> int:
    loop = asyncio.get_running_loop()
    got = 0
    while True:
        data = await loop.sock_recv(sock, 1 << 20)
        if not data:
            return got
        digest.update(data)
        got += len(data)


@pytest.mark.slow
@pytest.mark.parametrize("pump", PUMPS)
async def test_slow_reader_bounds_relay_memory(make_server, pump):
    limit = 1 << 20
    splice = PUMPS[pump]["splice"]
    srv = await make_server(**PUMPS[pump], pipe_size=limit, buffer_size=256 << 10)
    a, b = await tcp_pair(srv)
    sent_digest, got_digest = hashlib.sha256(), hashlib.sha256()
    sent = await push_until_blocked(a, sent_digest)  # b never reads meanwhile
    # The writer was stopped well short of what it wanted to send: only kernel socket buffers
    # (bounded by net.ipv4.tcp_{r,w}mem) and one pipe/buffer inside the relay hold data.
    assert sent < CAP // 2
    held = srv.buffered()
    assert 0 < held <= (limit if splice else 256 << 10)
    a.shutdown(socket.SHUT_WR)
    got = await drain(b, got_digest)  # the reader wakes up: everything arrives, in order
    assert got == sent and got_digest.digest() == sent_digest.digest()
    a.close()
    b.close()
    await wait_for(lambda: not srv.relay.pairs)
    assert srv.buffered() == 0


@pytest.mark.slow
async def test_slow_websocket_reader_throttles_tcp_writer(make_server):
    srv = await make_server()
    async with websockets.connect(f"ws://127.0.0.1:{srv.websocket_port}/", max_size=None,
                                  max_queue=4) as ws:
        await ws.send(hs(b"w"))
        await wait_for(lambda: srv.relay.pending)
        a = socket.create_connection(("127.0.0.1", srv.port))
        a.sendall(hs(b"t"))
        assert await ws.recv() == b"ok\n"
        a.setblocking(False)
        assert await asyncio.get_running_loop().sock_recv(a, 3) == b"ok\n"
        sent_digest, got_digest = hashlib.sha256(), hashlib.sha256()
        sent = await push_until_blocked(a, sent_digest)
        assert sent < CAP // 2
        a.shutdown(socket.SHUT_WR)
        got = 0
        try:
            while got < sent:
                msg = await ws.recv()
                got_digest.update(msg)
                got += len(msg)
        except websockets.ConnectionClosed:
            pass
        assert got == sent and got_digest.digest() == sent_digest.digest()
        a.close()


@pytest.mark.slow
@pytest.mark.parametrize("reader", ["tcp", "websocket"])
async def test_relay_process_rss_stays_bounded(tmp_path, reader):
    """The same with the relay in its own process: its resident memory barely moves."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "burrow.transit_relay", "--host", "127.0.0.1", "--port", "0", "--websocket-port", "0",
        "--admin-port", "-1", "--no-splice", cwd=ROOT, stderr=asyncio.subprocess.PIPE)
    try:
        ports = None
        while ports is None:
            line = (await asyncio.wait_for(proc.stderr.readline(), 20)).decode()
            assert line, "relay exited"
            m = re.search(r"transit relay on tcp 127\.0\.0\.1:(\d+) websocket (\d+)", line)
            ports = m and (int(m.group(1)), int(m.group(2)))
        rss = psutil.Process(proc.pid).memory_info().rss
        loop = asyncio.get_running_loop()
        a = socket.create_connection(("127.0.0.1", ports[0]))
        a.sendall(hs(b"a"))
        await asyncio.sleep(0.2)
        if reader == "tcp":
            b = socket.create_connection(("127.0.0.1", ports[0]))
            b.sendall(hs(b"b"))
            b.setblocking(False)
            assert await loop.sock_recv(b, 3) == b"ok\n"
        else:
            ws = await websockets.connect(f"ws://127.0.0.1:{ports[1]}/", max_size=None, max_queue=4)
            await ws.send(hs(b"w"))
            assert await ws.recv() == b"ok\n"
        a.setblocking(False)
        assert await loop.sock_recv(a, 3) == b"ok\n"
        sent = await push_until_blocked(a, hashlib.sha256())
        grown = psutil.Process(proc.pid).memory_info().rss - rss
        assert sent < CAP // 2
        assert grown < 24 << 20, f"relay RSS grew by {grown} bytes while {sent} were sent"
        a.close()
        if reader == "websocket":
            await ws.close()
    finally:
        proc.terminate()
        await proc.wait()
