"""`burrow` command line: send / receive (file transfer v1), plus relay-probe and forward hooks.

Exit codes (also in docs/client.md):
  0 success                    1 other failure (transfer error, bad hash, remote error)
  2 usage error (argparse)     3 wrong code (mood scary)
  4 mailbox server unreachable or server error / welcome error
  5 transfer rejected (by us, the peer or a safety check)
  6 peer gone / never came / timeout     7 transit connection failed     130 interrupted
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import logging
import os
import sys
from pathlib import Path

from burrow.client.apps.progress import ProgressBar, human
from burrow.client.apps.receive import Received, ReceiveOptions, receive, text_of
from burrow.client.apps.transfer import (
    Offer,
    discard_transit,
    early_transit,
    prepare_transit,
    send_path,
    send_text,
    take_transit,
)

from . import codes, errors
from .heap import retain_freed_memory
from .options import DEFAULT_RELAY_URL as DEFAULT_RELAY_URL  # noqa: F401 - re-exported
from .options import DEFAULT_TRANSIT_HELPER as DEFAULT_TRANSIT_HELPER  # noqa: F401
from .options import ClientParser, VersionAction, add_server_options, explain, peer_command, ssl_context
from .prompt import ask_yes, input_line
from .wormhole import APPID, Wormhole

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_WRONG_CODE, EXIT_SERVER = 0, 1, 2, 3, 4
EXIT_REJECTED, EXIT_PEER, EXIT_TRANSIT, EXIT_INTERRUPTED = 5, 6, 7, 130

_EXIT_FOR = [
    (errors.WrongCodeError, EXIT_WRONG_CODE),
    (errors.ServerConnectionError, EXIT_SERVER),
    (errors.ServerError, EXIT_SERVER),
    (errors.WelcomeError, EXIT_SERVER),
    (errors.TransferRejected, EXIT_REJECTED),
    (errors.LonelyError, EXIT_PEER),
    (errors.PeerGoneError, EXIT_PEER),
    (errors.TimeoutError_, EXIT_PEER),
    (errors.TransitError, EXIT_TRANSIT),
    (errors.CodeFormatError, EXIT_USAGE),
]


def exit_code_for(e: BaseException) -> int:
    for cls, code in _EXIT_FOR:
        if isinstance(e, cls):
            return code
    if isinstance(e, errors.TransferError) and "rejected" in str(e):
        return EXIT_REJECTED
    return EXIT_FAIL


def build_parser() -> argparse.ArgumentParser:
    common = ClientParser(prog="burrow", add_help=False)
    add_server_options(common)
    common.add_argument("--appid", default=APPID, help=f"application id (default: {APPID})")
    common.add_argument("--hide-progress", action="store_true", help="no progress bar (default: off)")
    common.add_argument("--no-listen", action="store_true",
                        help="do not listen for direct connections: the peer dials us or we use the transit "
                             "relay (default: off)")
    common.add_argument("--stun-server", default=os.environ.get("BURROW_STUN_SERVER"), metavar="HOST[:PORT]",
                        help="STUN server (e.g. burrow-relay's, port 3478) for learning the NAT's public address; "
                             "with it, peers behind port-preserving NATs get a direct path (env BURROW_STUN_SERVER; "
                             "default: none)")
    common.add_argument("--stun-port2", type=int, default=0, metavar="PORT",
                        help="the STUN server's second port (burrow-relay --stun-port2): skip the STUN hint behind "
                             "NATs whose mapping depends on the destination (default: 0, none)")
    common.add_argument("--no-portmap", action="store_true", default=bool(os.environ.get("BURROW_NO_PORTMAP")),
                        help="do not ask the router for a port mapping (NAT-PMP, UPnP IGD; env BURROW_NO_PORTMAP=1; "
                             "default: off)")
    common.add_argument("--derp-relay", default=os.environ.get("BURROW_DERP_RELAY"), metavar="URL",
                        help="DERP packet relay (burrow-relay, https://HOST:PORT) for UDP hole punching between "
                             "Dilation peers that both name one; --ca-file/--insecure apply to it too (env "
                             "BURROW_DERP_RELAY; default: none)")
    common.add_argument("--verify", action="store_true",
                        help="show the verifier (sender: ask before sending; default: off)")
    p = ClientParser(prog="burrow", description="Magic-Wormhole compatible file transfer.")
    p.add_argument("--version", action=VersionAction)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=ClientParser)
    s = sub.add_parser("send", parents=[common], help="send text, a file or a directory")
    s.add_argument("what", nargs="*", help="file or directory to send (several with --dilated)")
    s.add_argument("--text", help="send this text message ('-' reads stdin; default: send a FILE/DIR)")
    s.add_argument("--code", help="use this code instead of allocating one (default: a new code)")
    s.add_argument("--code-length", type=int, default=codes.DEFAULT_CODE_LENGTH,
                   help=f"words in the code (default: {codes.DEFAULT_CODE_LENGTH})")
    how = s.add_mutually_exclusive_group()
    how.add_argument("--dilated", action="store_true",
                     help="only Dilated File-Transfer (fails if the receiver cannot take it): many files over "
                          "parallel subchannels, resumable (default: Dilated to a burrow receiver, classic to "
                          "others)")
    how.add_argument("--classic", action="store_true",
                     help="only a classic transfer (file-transfer v1, what magic-wormhole and wormhole-william "
                          "receivers get) even to a burrow receiver (default: off)")
    s.add_argument("--parallel", type=int, default=8, help="subchannels used with --dilated (default: 8)")
    r = sub.add_parser("receive", aliases=["recv"], parents=[common], help="receive with a code")
    r.add_argument("code", nargs="?", help="the code (asked interactively, with tab completion, if absent)")
    r.add_argument("--accept-file", action="store_true",
                   help="accept without asking; never overwrites (default: off)")
    r.add_argument("--output-file", "-o", type=Path,
                   help="where to write the file or directory (default: its name, in this directory)")
    r.add_argument("--sha256", action="store_true",
                   help="compute and print the SHA-256 of a received file (of the zip, for a directory) even "
                        "when the sender does not need it; burrow senders do not, other senders always get it "
                        "(default: off)")
    sub.add_parser("relay-probe", help="check a DERP/iroh relay end to end (burrow relay-probe --help)",
                   add_help=False)
    sub.add_parser("netcheck", help="what the network allows: NAT kind, public address, port mapping "
                                    "(burrow netcheck --help)", add_help=False)
    sub.add_parser("forward", help="forward TCP ports to or from another computer (burrow forward --help)",
                   add_help=False)
    sub.add_parser("messaging", help="peer-to-peer messages: listen / send (burrow messaging --help)",
                   add_help=False)
    return p


def nat_options(args: argparse.Namespace):
    """The client.nat options the CLI flags ask for (None with --no-listen: nothing to advertise)."""
    from .nat.options import NatOptions, parse_stun_server

    if getattr(args, "no_listen", False):
        return None
    stun = parse_stun_server(args.stun_server) if getattr(args, "stun_server", None) else None
    return NatOptions(stun_server=stun, stun_port2=getattr(args, "stun_port2", 0),
                      portmap=not getattr(args, "no_portmap", False), derp_url=getattr(args, "derp_relay", None),
                      derp_ca_file=getattr(args, "ca_file", None), derp_insecure=getattr(args, "insecure", False))


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _wormhole(args: argparse.Namespace, **kwargs) -> Wormhole:
    return Wormhole(args.relay_url, args.appid, transit_helper=args.transit_helper,
                    on_welcome=_on_welcome(args.relay_url), ssl_context=ssl_context(args), nat=nat_options(args),
                    **kwargs)


def _on_welcome(relay_url: str):
    def cb(welcome: dict) -> None:
        if "motd" in welcome:
            _say(f"Server (at {relay_url}) says:\n {welcome['motd']}")
    return cb


class _LoadDilation:
    """Load Dilation and Dilated File-Transfer in a thread (about 0.05 CPU-s) before a burrow peer's file needs
    them. A text, or a small file sent inside its message, never does; so unless a file surely will, the
    load starts only when this side would wait anyway: while the user types the code, or once the peer
    has kept us waiting for IDLE seconds; else the peer's versions say whether it is needed."""

    IDLE = 0.1

    def __init__(self) -> None:
        self._timer: asyncio.TimerHandle | None = None
        self._started = False

    def now(self) -> None:
        from burrow.client.apps.transfer_versions import prepare_dilated_transfer

        self.not_needed()
        if not self._started:
            self._started = True
            asyncio.get_running_loop().run_in_executor(None, prepare_dilated_transfer)

    def when_idle(self) -> None:
        if not self._started:
            self._timer = asyncio.get_running_loop().call_later(self.IDLE, self.now)

    def not_needed(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


_asking: set[Wormhole] = set()  # wormholes whose user is being asked (y/N) right now


async def _ask_peer(w: Wormhole, prompt: str) -> bool:
    """Ask on the terminal; Ctrl-C meanwhile is reported to the sender (see cmd_receive)."""
    _asking.add(w)
    answer = await ask_yes(prompt)  # when Ctrl-C cancels this, w stays in _asking for cmd_receive to see
    _asking.discard(w)
    return answer


def _interrupted_at_question(w: Wormhole) -> None:
    """Ctrl-C while the user was being asked: tell the sender at once, as a rejection."""
    if w in _asking:
        _say("")
        w.send_message(b'{"error": "transfer rejected: the receiver was interrupted (Ctrl-C)"}')


async def _read_code(w: Wormhole, length: int = codes.DEFAULT_CODE_LENGTH) -> str:
    """Read the code from the terminal with readline tab completion of nameplates and words."""
    nameplates: list[str] = []
    try:
        nameplates = await w.list_nameplates(timeout=5)
    except (errors.WormholeError, TimeoutError):
        pass
    if sys.stdin.isatty():
        try:
            import readline

            state: dict = {}

            def complete(text: str, index: int) -> str | None:
                if index == 0:
                    line = readline.get_line_buffer()
                    state["matches"] = codes.completions(line, nameplates, max(length, line.count("-")))
                matches = state.get("matches", [])
                return matches[index] if index < len(matches) else None

            readline.set_completer_delims("")
            readline.set_completer(complete)
            readline.parse_and_bind("tab: complete")
        except ImportError:
            pass
    try:
        code = await input_line("Enter receive wormhole code: ")
    except EOFError:
        raise errors.CodeFormatError("no code was entered") from None
    return code.strip()


async def cmd_send(args: argparse.Namespace) -> int:
    if args.dilated and args.what and args.text is None:
        from burrow.client.apps.dilated_transfer_cli import cmd_send_dilated

        return await cmd_send_dilated(args)
    if len(args.what) > 1:
        _say("burrow send: several files need --dilated (or send their folder)")
        return EXIT_USAGE
    if bool(args.what) == (args.text is not None):
        _say("burrow send: give a FILE/DIR or --text (exactly one)")
        return EXIT_USAGE
    text = sys.stdin.read() if args.text == "-" else args.text
    path = Path(args.what[0]) if args.what else None
    if path is not None and not path.exists():
        _say(f"burrow send: error: {path} does not exist")
        return EXIT_USAGE
    if path is not None and not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
        _say(f"burrow send: error: {path} is not readable")
        return EXIT_USAGE
    from burrow.client.apps.transfer_versions import (
        CLASSIC_SENDER_APP_VERSIONS,
        can_receive_dilated,
        dilated_sender_versions,
        takes_inline,
    )

    # A FILE/DIR offers Dilation too: a burrow receiver takes it (first byte over the relay at once, a direct
    # path later, without loss); other receivers ignore the offer and get the classic transfer below. A small
    # file also offers to travel inside its offer message (apps/inline.py), which a burrow receiver takes.
    dilate = path is not None and not args.classic
    small = None
    if dilate:
        from burrow.client.apps.inline import read_small

        small = read_small(path)
    w = _wormhole(args, dilation=dilate, app_versions=dilated_sender_versions(
        1, inline=None if small is None else len(small)) if dilate else CLASSIC_SENDER_APP_VERSIONS)
    early = None
    dilation = _LoadDilation()
    if dilate and small is None:
        dilation.now()
    if path is not None:  # load transit, listen and look up our NAT's address beside the code exchange
        warming = asyncio.get_running_loop().run_in_executor(None, prepare_transit)
        early = asyncio.ensure_future(early_transit(w, "sender", no_listen=args.no_listen, ready=warming))
    try:
        await w.open()
        if args.code:
            w.set_code(args.code)
        else:
            w.allocate_code(args.code_length)
        if dilate:
            dilation.when_idle()
        code = await w.get_code()
        _say(f"Wormhole code is: {code}\nOn the other computer, please run:\n\n"
             f"{peer_command(args, 'receive', *(['--verify'] if args.verify else []), code)}\n")
        verifier = await w.get_verifier()
        dilation.not_needed()
        if args.verify:
            if not await ask_yes(f"Verifier {verifier.hex()}. ok? (yes/no): "):
                w.send_message(b'{"error": "sender rejected verification check, abandoned transfer"}')
                raise errors.TransferRejected("verification rejected, abandoned transfer")
        peer = await w.get_peer_versions() if path is not None else None
        if text is not None:
            await send_text(w, text)
            _say("text message sent")
        elif small is not None and takes_inline(peer, len(small)):
            from burrow.client.apps.inline import send_inline

            _say(f"Sending file {path.name!r}")
            desc = await send_inline(w, path.name, small)
            _say(f"Transfer complete ({desc}).")
        elif dilate and can_receive_dilated(peer):
            await discard_transit(early)
            from burrow.client.apps.dilated_transfer_cli import send_one_dilated

            return await send_one_dilated(w, args, path)
        else:
            assert early is not None
            transit = await take_transit(early)
            _say(f"Sending {'directory' if path.is_dir() else 'file'} {path.name!r}")
            bar = ProgressBar(enabled=False if args.hide_progress else None)
            confirmed = []
            try:
                desc = await send_path(w, path, no_listen=args.no_listen, progress=bar,
                                       on_connected=lambda d: _say(f"Sending ({d})..."),
                                       on_acknowledged=confirmed.append, transit=transit)
            finally:
                bar.finish()
            digest = f"; the receiver wrote SHA-256 {confirmed[0]}" if confirmed and confirmed[0] else ""
            _say(f"Transfer complete ({desc}){digest}.")
        await w.close()
        return EXIT_OK
    finally:
        dilation.not_needed()
        await discard_transit(early)
        await _close_quietly(w)


async def cmd_receive(args: argparse.Namespace) -> int:
    from burrow.client.apps.transfer_versions import (
        RECEIVER_WORMHOLE_KWARGS,
        inline_sender,
        is_dilated_sender,
    )

    # Offering Dilation lets a `send --dilated` peer be recognised; classic senders ignore it.
    w = _wormhole(args, **RECEIVER_WORMHOLE_KWARGS)
    # a classic sender's file needs transit: listen and look up our NAT's address beside the code exchange
    # (for a text or a burrow sender it is closed unused). Loaded here rather than in a thread: the lookup's
    # wait starts sooner, and a typed-in-advance code makes the key exchange short.
    prepare_transit()
    early = asyncio.ensure_future(early_transit(w, "receiver", no_listen=args.no_listen))
    dilation = _LoadDilation()  # a burrow sender's larger file comes Dilated
    try:
        await w.open()
        if not args.code:
            dilation.now()  # the user is about to type the code
        code = args.code or await _read_code(w)
        w.set_code(code)
        dilation.when_idle()
        verifier = await w.get_verifier()
        dilation.not_needed()
        if args.verify:
            _say(f"Verifier {verifier.hex()}.")
        if is_dilated_sender(w.peer_versions) and not inline_sender(w.peer_versions):
            from burrow.client.apps.dilated_transfer_cli import receive_dilated

            return await receive_dilated(w, args, lambda prompt: _ask_peer(w, prompt))
        bar = ProgressBar(enabled=False if args.hide_progress else None)

        async def confirm(offer: Offer, dest: Path, exists: bool) -> bool:
            what = f"{offer.kind} {offer.name!r} ({human(offer.size)})"
            if exists:
                _say(f"{dest} already exists.")
                if args.accept_file or not sys.stdin.isatty():
                    return False
                return await _ask_peer(w, f"Overwrite {dest} with the {what}? (y/N) ")
            if args.accept_file:
                return True
            return await _ask_peer(w, f"Receive {what} into {dest}? (y/N) ")

        opts = ReceiveOptions(output=args.output_file, confirm=confirm, no_listen=args.no_listen, progress=bar,
                              on_connected=lambda d: _say(f"Receiving ({d})..."), transit=await take_transit(early),
                              sha256=args.sha256)
        if inline_sender(w.peer_versions):
            from burrow.client.apps.inline import receive_inline

            got: Received = await receive_inline(w, opts)
        else:
            try:
                got = await receive(w, opts)
            finally:
                bar.finish()
        if got.offer.kind == "text":
            print(text_of(got), flush=True)
        else:
            _say(f"Received {got.offer.kind} written to {got.path}" + (f" (sha256 {got.sha256})" if got.sha256 else ""))
        await w.close()
        return EXIT_OK
    except asyncio.CancelledError:  # Ctrl-C; the question may be asked in a Dilation task, not in this one
        _interrupted_at_question(w)
        raise
    finally:
        dilation.not_needed()
        await discard_transit(early)
        await _close_quietly(w)


async def _close_quietly(w: Wormhole) -> None:
    try:
        await w.close()
    except errors.WormholeError:
        pass


def _hook(module: str, argv: list[str]) -> int:
    if "--version" in argv:  # every subcommand answers --version, also those with their own parser
        print(f"burrow {_version()}")
        return EXIT_OK
    if importlib.util.find_spec(module) is None:
        _say(f"burrow: {module} is not installed in this build")
        return EXIT_USAGE
    return int(importlib.import_module(module).main(argv) or 0)


def _version() -> str:
    from .version import __version__

    return __version__


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    retain_freed_memory()
    if argv and argv[0] == "relay-probe":
        sys.exit(_hook("burrow.client.apps.relay_probe", argv[1:]))
    if argv and argv[0] == "netcheck":
        sys.exit(_hook("burrow.client.nat.cli", argv[1:]))
    if argv and argv[0] == "forward":
        sys.exit(_hook("burrow.client.apps.forward", argv[1:]))
    if argv and argv[0] == "messaging":
        sys.exit(_hook("burrow.client.messaging.cli", argv[1:]))
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("BURROW_LOG_LEVEL", "WARNING").upper(), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("websockets").setLevel(logging.WARNING)
    handler = cmd_send if args.command == "send" else cmd_receive
    try:
        rc = asyncio.run(handler(args))
    except KeyboardInterrupt:
        _say("interrupted")
        rc = EXIT_INTERRUPTED
    except errors.WormholeError as e:
        _say(f"burrow {args.command}: error: {explain(e)}")
        rc = exit_code_for(e)
    except OSError as e:  # a file we cannot read or write, a full disk...
        _say(f"burrow {args.command}: error: {explain(e)}")
        rc = EXIT_FAIL
    sys.exit(rc)



if __name__ == "__main__":
    main()
