"""`burrow messaging listen|send`: talk over Skywire's messaging servers from the command line.

  burrow messaging listen --discovery URL --key-file FILE [--server ADDR] [--count N] [--show-sender]
      prints `pk: <our public key hex>` first, then each message received, one per line
  burrow messaging send --discovery URL --key-file FILE [--server ADDR] PUBLIC_KEY TEXT
      opens a channel to PUBLIC_KEY, sends TEXT ('-' reads standard input), closes the channel

ADDR is `host:port` (its key is looked up among the discovery's available servers) or
`PUBKEY@host:port`; without it the client picks from the available servers. A message's newlines and
backslashes are printed as `\\n` and `\\\\`, so each message stays on one line.

Exit codes: 0 done (send: the remote confirmed the close, so it read the message), 2 usage,
4 discovery or servers unreachable, 5 channel refused, 6 remote not found or the close was not confirmed,
130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from burrow.messaging import frames, keys
from burrow.messaging.errors import KeyFormatError

from .aio import MessagingClient, PeerNotFound
from .discovery import DiscoveryError
from .link import ChannelRefusedError

EXIT_OK, EXIT_USAGE, EXIT_SERVER, EXIT_REJECTED, EXIT_PEER, EXIT_INTERRUPTED = 0, 2, 4, 5, 6, 130


DISCOVERY_ENV = ("BURROW_CLIENT_DISCOVERY_URL", "BURROW_DISCOVERY_URL")  # new name first, the older one kept
DEFAULT_DISCOVERY = "http://127.0.0.1:4003"


def build_parser() -> argparse.ArgumentParser:
    from burrow.client.options import ClientParser, VersionAction, from_env

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--discovery", default=from_env(DISCOVERY_ENV, DEFAULT_DISCOVERY), metavar="URL",
                        help=f"messaging discovery URL (env {DISCOVERY_ENV[0]}; default: {DEFAULT_DISCOVERY})")
    common.add_argument("--key-file", required=True,
                        help="this client's secp256k1 secret key (64 hex); created with mode 0600 if missing")
    common.add_argument("--server", action="append", metavar="ADDR",
                        help="link to this messaging server (host:port or PUBKEY@host:port); repeatable "
                             "(default: chosen among the discovery's servers)")
    common.add_argument("--timeout", type=float, default=10.0,
                        help="seconds for each network step (default: 10 seconds)")
    common.add_argument("--refresh", type=float, default=20.0,
                        help="seconds between refreshes of our discovery entry, below the discovery's entry TTL "
                             "(default: 20 seconds)")
    common.add_argument("--version", action=VersionAction)
    p = ClientParser(prog="burrow messaging", description="Messaging over Skywire's servers.")
    p.add_argument("--version", action=VersionAction)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=ClientParser)
    listen = sub.add_parser("listen", parents=[common], help="print messages sent to our key")
    listen.add_argument("--count", type=int, default=0, help="exit after this many messages (0 = never; default: 0)")
    listen.add_argument("--show-sender", action="store_true",
                        help="prefix each message with the sender's key (default: off)")
    send = sub.add_parser("send", parents=[common], help="send one message to a public key")
    send.add_argument("public_key", help="the remote client's public key (66 hex)")
    send.add_argument("text", help="the message ('-' reads standard input)")
    return p


def one_line(data: bytes) -> str:
    return data.decode("utf-8", "replace").replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def _listen(client: MessagingClient, args) -> int:
    print(f"pk: {client.public.hex()}", flush=True)
    received = asyncio.Queue()

    async def drain(ch) -> None:
        async for data in ch:
            await received.put((ch.remote, data))

    tasks = set()

    async def acceptor() -> None:
        while True:
            ch = await client.accept()
            task = asyncio.create_task(drain(ch))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    accept_task = asyncio.create_task(acceptor())
    try:
        count = 0
        while not args.count or count < args.count:
            remote, data = await received.get()
            prefix = f"{remote.hex()}: " if args.show_sender else ""
            print(prefix + one_line(data), flush=True)
            count += 1
    finally:
        accept_task.cancel()
        for task in list(tasks):
            task.cancel()
    return EXIT_OK


async def _send(client: MessagingClient, args) -> int:
    remote = keys.parse_public_key(args.public_key)
    data = sys.stdin.buffer.read() if args.text == "-" else args.text.encode()
    if len(data) > frames.MAX_PLAINTEXT:
        _say(f"burrow messaging send: at most {frames.MAX_PLAINTEXT} bytes per message")
        return EXIT_USAGE
    channel = await client.dial(remote)
    await channel.send(data)
    await channel.close()
    if channel.closed_reason != "closed":
        _say("message sent, but the remote did not confirm the close")
        return EXIT_PEER
    _say("message delivered")
    return EXIT_OK


async def run(args) -> int:
    try:
        secret = keys.load_or_create(args.key_file)
    except (KeyFormatError, OSError) as exc:
        _say(f"burrow messaging: {exc}")
        return EXIT_USAGE
    try:
        client = MessagingClient(secret, args.discovery, servers=args.server, timeout=args.timeout,
                                 refresh=args.refresh)
    except ValueError as exc:
        _say(f"burrow messaging: {exc}")
        return EXIT_USAGE
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    loop.add_signal_handler(signal.SIGTERM, main.cancel)
    try:
        await client.start()
        return await (_listen(client, args) if args.command == "listen" else _send(client, args))
    except (DiscoveryError, ConnectionError) as exc:
        _say(f"burrow messaging: {exc}")
        return EXIT_SERVER
    except PeerNotFound as exc:
        _say(f"burrow messaging: {exc}")
        return EXIT_PEER
    except ChannelRefusedError as exc:
        _say(f"burrow messaging: {exc}")
        return EXIT_REJECTED
    except KeyFormatError as exc:
        _say(f"burrow messaging: {exc}")
        return EXIT_USAGE
    except asyncio.CancelledError:  # SIGTERM: a clean stop
        return EXIT_OK
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("BURROW_LOG_LEVEL", "WARNING").upper(), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
