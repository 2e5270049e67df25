"""CLI glue for Dilated File-Transfer, for client/cli.py to call (`burrow send --dilated`, `burrow receive`).

  rc = await cmd_send_dilated(args)       # args: relay_url, transit_helper, appid, code, code_length,
                                          #       no_listen, hide_progress, what (path), optional parallel
  w = Wormhole(..., **RECEIVER_WORMHOLE_KWARGS)  # (transfer_versions.py) so a dilated sender can be recognised
  if is_dilated_sender(w.peer_versions):  # (transfer_versions.py) after `await w.get_verifier()`
      rc = await receive_dilated(w, args, confirm)  # confirm(name, size, is_dir) -> bool, may be None
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from burrow.client.apps.dilated_transfer import Report, receive_on, send_on
from burrow.client.apps.transfer_versions import SENDER_WORMHOLE_KWARGS
from burrow.client.errors import TransferError
from burrow.client.options import peer_command, ssl_context

PEER_REASON_WAIT = 2.0  # seconds a failed send waits for the receiver's reason (its mailbox error)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def say_status(s) -> None:
    """A Dilation status change, as a user reads it (connections, not the state machine's names)."""
    if s.state == "connected":
        _say(f"Connected{' (' + s.path + ')' if s.path else ''}")
    elif s.state == "reconnecting":
        _say("Connection lost; reconnecting...")


class _Progress:
    """Adds up the bytes Dilated File-Transfer reports and draws them (only on a terminal)."""

    def __init__(self, enabled: bool, total: int) -> None:
        from burrow.client.apps.progress import ProgressBar

        self.bar, self.total, self.done = ProgressBar(enabled=None if enabled else False), total, 0

    def __call__(self, n: int) -> None:
        self.done += n
        self.bar(self.done, self.total)


def _summary(report: Report, verb: str) -> None:
    _say(f"{verb} {len(report.sent) or len(report.received)} file(s), {report.data_bytes} bytes"
         + (f"; skipped (already there): {', '.join(report.skipped)}" if report.skipped else "")
         + (f"; rejected: {', '.join(report.rejected)}" if report.rejected else ""))


async def cmd_send_dilated(args) -> int:
    from burrow.client.wormhole import Wormhole

    paths = [Path(p) for p in (args.what if isinstance(args.what, list) else [args.what])]
    missing = [p for p in paths if not p.exists()]
    if missing:
        _say(f"burrow send: {missing[0]} does not exist")
        return 2
    total = sum(p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                for p in paths)
    from ..cli import nat_options

    w = Wormhole(args.relay_url, args.appid, transit_helper=args.transit_helper, ssl_context=ssl_context(args),
                 nat=nat_options(args),
                 **SENDER_WORMHOLE_KWARGS)
    await w.open()
    try:
        if args.code:
            w.set_code(args.code)
        else:
            w.allocate_code(args.code_length)
        code = await w.get_code()
        _say(f"Wormhole code is: {code}\nOn the other computer, please run:\n\n{peer_command(args, 'receive', code)}\n")
        progress = _Progress(not args.hide_progress, total)
        sending = asyncio.ensure_future(
            send_on(w, paths, parallel=getattr(args, "parallel", 8), listen=not args.no_listen,
                    progress=progress if progress.bar.enabled else None, on_status=say_status))
        watching = asyncio.ensure_future(_peer_error(w))
        try:
            await asyncio.wait({sending, watching}, return_when=asyncio.FIRST_COMPLETED)
            if sending.done() and sending.exception() is not None and not watching.done():
                # the receiver's stop can end our subchannels before its reason arrives by the mailbox
                await asyncio.wait({watching}, timeout=PEER_REASON_WAIT)
            if watching.done() and watching.result() is not None and (not sending.done() or sending.exception()):
                sending.cancel()  # the receiver gave up (Ctrl-C...): its reason, not our broken subchannel
                raise TransferError(f"remote error: {watching.result()}")
            report = await sending
        finally:
            watching.cancel()
            sending.cancel()
            progress.bar.finish()
        _summary(report, "Sent")
        await w.close()
        return 5 if report.rejected else 0
    finally:
        try:
            await w.close()
        except Exception:
            pass


async def _peer_error(w) -> str | None:
    """The peer's `{"error": ...}` mailbox message (a receiver stopped at its question), or None."""
    from burrow.client.errors import WormholeError

    while True:
        try:
            msg = json.loads(await w.get_message())
        except (WormholeError, ValueError):
            return None
        if isinstance(msg, dict) and "error" in msg:
            return str(msg["error"])


async def receive_dilated(w, args, confirm: Callable[[str, int, bool], Awaitable[bool]] | None = None) -> int:
    out = Path(args.output_file) if getattr(args, "output_file", None) else Path.cwd()
    out.mkdir(parents=True, exist_ok=True)
    if confirm is None and getattr(args, "accept_file", False):
        async def confirm(name: str, size: int, is_dir: bool) -> bool:
            return True
    report = await receive_on(w, out, accept=confirm, listen=not args.no_listen,
                              on_status=say_status,
                              on_text=lambda t: _say(f"peer says: {t}"))
    _summary(report, "Received")
    return 5 if report.rejected else 0
