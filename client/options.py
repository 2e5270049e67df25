"""Options every `burrow` subcommand shares: where the mailbox and transit helper are, how to trust TLS.

Environment: BURROW_CLIENT_MAILBOX_URL and BURROW_CLIENT_TRANSIT_HELPER (the older BURROW_RELAY_URL and
BURROW_TRANSIT_HELPER are still read, after the new names). Also the one-line wording of the errors a user
can fix (mailbox unreachable, certificate not trusted), so every subcommand says them the same way.
"""

from __future__ import annotations

import argparse
import os
import shlex
import ssl
import sys
from collections.abc import Mapping
from urllib.parse import urlsplit

DEFAULT_RELAY_URL = "ws://127.0.0.1:4000/v1"
DEFAULT_TRANSIT_HELPER = "tcp:127.0.0.1:4001"
MAILBOX_ENV = ("BURROW_CLIENT_MAILBOX_URL", "BURROW_RELAY_URL")  # new name first, old name kept as an alias
TRANSIT_ENV = ("BURROW_CLIENT_TRANSIT_HELPER", "BURROW_TRANSIT_HELPER")


class ClientParser(argparse.ArgumentParser):
    """argparse with one-line errors: `burrow send: error: WHAT (see burrow send --help)`, exit status 2."""

    def error(self, message: str):  # noqa: ANN201 - argparse's signature
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class VersionAction(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print the version and exit"):  # noqa: A002 - argparse's keyword
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from .version import __version__

        print(f"burrow {__version__}")
        parser.exit()


def from_env(names: tuple[str, ...], default: str, environ: Mapping[str, str] | None = None) -> str:
    return _env_source(names, environ)[0] or default


def _env_source(names: tuple[str, ...], environ: Mapping[str, str] | None) -> tuple[str | None, str | None]:
    """(value, variable name) of the first of `names` set in the environment, else (None, None)."""
    environ = os.environ if environ is None else environ
    for name in names:
        if environ.get(name):
            return environ[name], name
    return None, None


def _naming_env(check, names: tuple[str, ...], environ: Mapping[str, str] | None):
    """An argparse type that says which environment variable a bad value came from."""
    value, name = _env_source(names, environ)

    def checked(text: str) -> str:
        try:
            return check(text)
        except argparse.ArgumentTypeError as e:
            if name is not None and text == value:
                raise argparse.ArgumentTypeError(f"{e} (from {name})") from None
            raise
    return checked


def mailbox_url(text: str) -> str:
    """argparse type: a ws:// or wss:// URL."""
    parts = urlsplit(text)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not a ws:// or wss:// URL")
    return text


def transit_hint(text: str) -> str:
    """argparse type: tcp:HOST:PORT."""
    kind, _, rest = text.partition(":")
    host, _, port = rest.rpartition(":")
    if kind != "tcp" or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not tcp:HOST:PORT")
    return text


def add_server_options(p: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    """--relay-url, --transit-helper, --ca-file, --insecure, --version."""
    p.add_argument("--relay-url", metavar="URL", type=_naming_env(mailbox_url, MAILBOX_ENV, environ),
                   default=from_env(MAILBOX_ENV, DEFAULT_RELAY_URL, environ),
                   help=f"mailbox WebSocket URL (env {MAILBOX_ENV[0]}; default: {DEFAULT_RELAY_URL})")
    p.add_argument("--transit-helper", metavar="tcp:HOST:PORT", type=_naming_env(transit_hint, TRANSIT_ENV, environ),
                   default=from_env(TRANSIT_ENV, DEFAULT_TRANSIT_HELPER, environ),
                   help=f"transit relay, used when no direct connection works (env {TRANSIT_ENV[0]}; "
                        f"default: {DEFAULT_TRANSIT_HELPER})")
    p.add_argument("--ca-file", metavar="FILE",
                   help="trust this CA (or self-signed) certificate for a wss:// mailbox (default: the "
                        "system's CAs)")
    p.add_argument("--insecure", action="store_true",
                   help="do not verify the wss:// mailbox's certificate (testing only; default: off)")
    p.add_argument("--version", action=VersionAction)


def peer_command(args: argparse.Namespace, command: str, *extra: str) -> str:
    """The command the other computer runs: `burrow receive [--relay-url U] [--transit-helper H] ... CODE`.

    The servers are named whenever they differ from the built-in defaults, so the line works on a
    computer whose environment says nothing about them.
    """
    words = ["burrow", command]
    if args.relay_url != DEFAULT_RELAY_URL:
        words += ["--relay-url", args.relay_url]
    if args.transit_helper != DEFAULT_TRANSIT_HELPER:
        words += ["--transit-helper", args.transit_helper]
    return " ".join(shlex.quote(w) for w in [*words, *extra])


def ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context for a wss:// mailbox (None for ws:// or the defaults)."""
    ca_file, insecure = getattr(args, "ca_file", None), getattr(args, "insecure", False)
    if not args.relay_url.startswith("wss:") or not (ca_file or insecure):
        return None
    ctx = ssl.create_default_context(cafile=ca_file)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


CERT_FIX = "; pass --ca-file FILE with its CA certificate, or --insecure to skip the check"


def explain(exc: BaseException) -> str:
    """One line for an error the user can act on (OSError and friends); the exception text otherwise."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the server's certificate is not trusted ({exc.verify_message}){CERT_FIX}"
    if isinstance(exc.__cause__, ssl.SSLCertVerificationError):  # the mailbox's, already worded
        return f"{exc}{CERT_FIX}"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc) or type(exc).__name__


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
