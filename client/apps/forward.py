"""`burrow forward`: carry local TCP ports over Dilation subchannels (in the spirit of the `fowl` tool).

Wire format: one side listens on a local port (`--local PORT[:HOST:TARGETPORT]`); every connection to it
opens a subchannel of subprotocol "forward" whose first message asks the peer to connect to
HOST:TARGETPORT. The peer only connects to targets it explicitly allows (`--allow HOST:PORT`), answers
`{"ok": true}` or `{"error": ...}`, and then both directions are copied byte for byte, with half-close.
Messages before the byte stream are a 4-byte big-endian length plus JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass

USAGE = """Reach a TCP service on another computer through a wormhole code, end-to-end encrypted.

On the computer that has the service (here a web server on its port 8000):

  burrow forward --allow 127.0.0.1:8000

It prints a code. On the other computer:

  burrow forward --code CODE --local 9000:127.0.0.1:8000

Connections to 127.0.0.1:9000 on the second computer now reach 127.0.0.1:8000 on the first. Only targets
named with --allow can be reached. Either side may start (the one without --code gets the code and
prints the command for the other). Both keep running until Ctrl-C."""

SUBPROTOCOL = "forward"
MAX_HEADER = 4096  # bytes of the JSON request/answer
CONNECT_TIMEOUT = 10.0  # seconds for the peer to reach the target
COPY_CHUNK = 256 * 1024
_LEN = struct.Struct(">L")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalSpec:
    listen_port: int
    target_host: str
    target_port: int

    @classmethod
    def parse(cls, text: str) -> LocalSpec:
        parts = text.split(":")
        if len(parts) == 1:
            return cls(int(parts[0]), "127.0.0.1", int(parts[0]))
        if len(parts) == 3:
            return cls(int(parts[0]), parts[1], int(parts[2]))
        raise ValueError(f"--local wants PORT or PORT:HOST:TARGETPORT, not {text!r}")


def parse_allow(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host:
        raise ValueError(f"--allow wants HOST:PORT, not {text!r}")
    return host, int(port)


def _msg(obj: dict) -> bytes:
    raw = json.dumps(obj).encode()
    return _LEN.pack(len(raw)) + raw


async def _read_msg(reader) -> dict:
    (n,) = _LEN.unpack(await reader.readexactly(4))
    if n > MAX_HEADER:
        raise ValueError("forward header too large")
    obj = json.loads(await reader.readexactly(n))
    if not isinstance(obj, dict):
        raise ValueError("forward header is not an object")
    return obj


async def _copy(reader, writer) -> None:
    try:
        while data := await reader.read(COPY_CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()
            else:
                writer.close()


async def _splice(a_reader, a_writer, b_reader, b_writer) -> None:
    await asyncio.gather(_copy(a_reader, b_writer), _copy(b_reader, a_writer))
    for w in (a_writer, b_writer):
        with contextlib.suppress(Exception):
            w.close()


class Forwarder:
    """Both roles at once: local listeners that open subchannels, and a listener that serves the peer's."""

    def __init__(self, dilated, *, allow: set[tuple[str, int]]):
        self.dilated = dilated
        self.allow = allow
        self.servers: list[asyncio.base_events.Server] = []
        self._tasks: set[asyncio.Task] = set()
        self.served = 0
        self.refused = 0

    def _spawn(self, coro) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def add_local(self, spec: LocalSpec, host: str = "127.0.0.1") -> int:
        async def handle(reader, writer):
            try:
                sr, sw = await self.dilated.open(SUBPROTOCOL)
                sw.write(_msg({"connect": f"{spec.target_host}:{spec.target_port}"}))
                answer = await asyncio.wait_for(_read_msg(sr), CONNECT_TIMEOUT + 30)
                if not answer.get("ok"):
                    log.warning("peer refused %s:%s: %s", spec.target_host, spec.target_port, answer.get("error"))
                    sw.close()
                    writer.close()
                    return
                await _splice(reader, writer, sr, sw)
            except Exception as e:  # one broken forward never disturbs the others
                log.warning("forward failed: %r", e)
                writer.close()

        server = await asyncio.start_server(lambda r, w: self._spawn(handle(r, w)), host, spec.listen_port)
        self.servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def serve(self) -> None:
        async for sr, sw in self.dilated.listen(SUBPROTOCOL):
            self._spawn(self._serve_one(sr, sw))

    async def _serve_one(self, sr, sw) -> None:
        try:
            req = await asyncio.wait_for(_read_msg(sr), 30)
            host, _, port = str(req.get("connect", "")).rpartition(":")
            target = (host, int(port)) if port.isdigit() else None
            if target is None or target not in self.allow:
                self.refused += 1
                sw.write(_msg({"error": f"target {req.get('connect')!r} is not allowed"}))
                sw.close()
                return
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*target), CONNECT_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as e:
            sw.write(_msg({"error": f"cannot connect: {e}"}))
            sw.close()
            return
        self.served += 1
        sw.write(_msg({"ok": True}))
        await _splice(sr, sw, reader, writer)

    async def close(self) -> None:
        for s in self.servers:
            s.close()
        for t in list(self._tasks):
            t.cancel()


async def run(args, *, on_code: Callable[[str], None] | None = None,
              on_ready: Callable[[list[int]], None] | None = None, stop: asyncio.Event | None = None) -> int:
    """The whole `burrow forward` session; returns the exit code. Runs until `stop` is set (or forever)."""
    from burrow.client.apps.dilated_transfer_cli import say_status
    from burrow.client.dilation.aio import dilate
    from burrow.client.options import ssl_context
    from burrow.client.wormhole import Wormhole

    w = Wormhole(args.relay_url, transit_helper=args.transit_helper, dilation=True,
                 app_versions={"forward": {"v": 1}}, ssl_context=ssl_context(args))
    await w.open()
    try:
        if args.code:
            w.set_code(args.code)
        else:
            w.allocate_code()
        code = await w.get_code()
        print(f"Wormhole code is: {code}", file=sys.stderr, flush=True)
        if not args.code:
            print(f"On the other computer, please run:\n\n{peer_command(args, code)}\n", file=sys.stderr, flush=True)
        if on_code:
            on_code(code)
        dilated = await dilate(w, listen=not args.no_listen, on_status=say_status)
        fw = Forwarder(dilated, allow={parse_allow(a) for a in args.allow})
        server_task = asyncio.ensure_future(fw.serve())
        ports = [await fw.add_local(LocalSpec.parse(s)) for s in args.local]
        for spec, port in zip(args.local, ports, strict=True):
            print(f"Forwarding 127.0.0.1:{port} to {LocalSpec.parse(spec).target_host}:"
                  f"{LocalSpec.parse(spec).target_port} on the other computer", file=sys.stderr, flush=True)
        if on_ready:
            on_ready(ports)
        await (stop.wait() if stop else asyncio.Event().wait())
        server_task.cancel()
        await fw.close()
        await dilated.close()
        return 0
    finally:
        with contextlib.suppress(Exception):
            await w.close()


def peer_command(args, code: str) -> str:
    """What the other computer runs: our --local targets become its --allow, our --allow its --local."""
    from burrow.client.options import peer_command as command

    extra = ["--code", code]
    for spec in map(LocalSpec.parse, args.local):
        extra += ["--allow", f"{spec.target_host}:{spec.target_port}"]
    for host, port in map(parse_allow, args.allow):
        extra += ["--local", f"{port}:{host}:{port}"]
    return command(args, "forward", *extra)


def build_parser() -> argparse.ArgumentParser:
    from burrow.client.options import ClientParser, add_server_options

    ap = ClientParser(prog="burrow forward", description=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_options(ap)
    ap.add_argument("--code", help="join this code (default: get a new code and print it)")
    ap.add_argument("--no-listen", action="store_true",
                    help="no direct listener: the other side dials us or the transit relay carries it (default: off)")
    ap.add_argument("--local", action="append", default=[], metavar="PORT[:HOST:TARGETPORT]",
                    help="listen on 127.0.0.1:PORT; each connection reaches HOST:TARGETPORT on the other computer "
                         "(default: 127.0.0.1 and the same port; repeatable)")
    ap.add_argument("--allow", action="append", default=[], metavar="HOST:PORT",
                    help="a target the other computer may reach through us (default: none; repeatable)")
    return ap


def main(argv: list[str] | None = None) -> int:
    from burrow.client.errors import WormholeError
    from burrow.client.options import explain

    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130
    except (WormholeError, OSError, ValueError) as e:
        print(f"burrow forward: error: {explain(e)}", file=sys.stderr, flush=True)
        return 1
