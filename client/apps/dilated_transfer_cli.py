"""CLI glue for Dilated File-Transfer, for client/cli.py to call (`burrow send FILE` to a burrow receiver,
`burrow send --dilated`, `burrow receive`).

  rc = await cmd_send_dilated(args)       # args: relay_url, transit_helper, appid, code, code_length,
                                          #       no_listen, hide_progress, what (paths), optional parallel
  w = Wormhole(..., dilation=True, app_versions=dilated_sender_versions(1))  # `burrow send FILE`
  if can_receive_dilated(await w.get_peer_versions()):  # (transfer_versions.py) a burrow receiver
      rc = await send_one_dilated(w, args, path)  # the lines a classic `burrow send FILE` prints
  w = Wormhole(..., **RECEIVER_WORMHOLE_KWARGS)  # (transfer_versions.py) so a dilated sender can be recognised
  if is_dilated_sender(w.peer_versions):  # (transfer_versions.py) after `await w.get_verifier()`
      rc = await receive_dilated(w, args, ask)  # ask(prompt) -> bool: the classic receiver's questions
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from burrow.client.apps.dilated_transfer import ALREADY_HAVE, Report, have, receive_on, send_on
from burrow.client.apps.transfer_versions import (
    SENDER_WORMHOLE_KWARGS,
    one_path_sender,
    peer_transfer,
    sender_needs_sha256,
)
from burrow.client.errors import TransferError, TransferRejected, TransitError
from burrow.client.options import peer_command, ssl_context

PEER_REASON_WAIT = 2.0  # seconds a failed send waits for the receiver's reason (its mailbox error)
# seconds either side waits for its first Dilation connection before it gives up (Dilation itself keeps
# trying for ever; classic Transit's overall bound is the same)
FIRST_CONNECTION_TIMEOUT = 120.0
NO_PATH = "found no transit path"  # in the error a side sends the other, as classic Transit's (apps/transfer.py)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def say_status(s) -> None:
    """A Dilation status change, as a user reads it (connections, not the state machine's names)."""
    if s.state == "connected":
        _say(f"Connected{' (' + s.path + ')' if s.path else ''}")
    elif s.state == "reconnecting":
        _say("Connection lost; reconnecting...")


class _FirstConnection:
    """on_status that prints the first connection as a classic transfer does ("Sending (Dilation, PATH)..."),
    later ones as say_status, and remembers the path in use."""

    def __init__(self, verb: str, held: bool = False) -> None:
        self.verb, self.path, self.held, self.said = verb, "", held, False

    def release(self) -> None:
        """A held line (the receiver's) is printed once the offer is accepted, as a classic receiver does."""
        self.held = False
        if self.path and not self.said:
            self.said = True
            _say(f"{self.verb} ({self.path})...")

    def __call__(self, s) -> None:
        if s.state == "connected" and not self.path:
            self.path = f"Dilation, {s.path}" if s.path else "Dilation"
            if not self.held:
                self.release()
            return
        if s.state == "reconnecting" and self.path.startswith("Dilation, relay"):
            return  # most likely the move to a direct path found behind the relay: say where we went instead
        if s.state == "connected":
            moved = self.path.startswith("Dilation, relay") and (s.path or "").startswith("direct")
            self.path = f"Dilation, {s.path}" if s.path else self.path
            if moved and self.said:
                _say(f"Moved to a direct path ({self.path})")
                return
        if self.said:
            say_status(s)


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
        if peer_transfer(await w.get_peer_versions()) is None:  # magic-wormhole 0.24, wormhole-william
            w.send_message(b'{"error": "the sender uses Dilated File-Transfer, which this client does not receive"}')
            raise TransferError("the receiver cannot receive a Dilated transfer (send without --dilated)")
        report = await _send(w, args, paths, say_status)
        _summary(report, "Sent")
        await w.close()
        return 5 if report.rejected else 0
    finally:
        try:
            await w.close()
        except Exception:
            pass


async def send_one_dilated(w, args, path: Path) -> int:
    """`burrow send FILE|DIR` to a burrow receiver, on a Wormhole whose key is agreed: a Dilated transfer that
    prints what a classic one prints."""
    _say(f"Sending {'directory' if path.is_dir() else 'file'} {path.name!r}")
    status = _FirstConnection("Sending")
    report = await _send(w, args, [path], status)
    if report.rejected:
        raise TransferRejected("remote error: transfer rejected")
    digest = next(iter(report.sha256.values()), "") if path.is_file() else ""
    _say(f"Transfer complete ({status.path}){'; the receiver wrote SHA-256 ' + digest if digest else ''}.")
    await w.close()
    return 0


def _size(p: Path) -> int:
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


class _Watch:
    """The wait for the first Dilation connection: at most FIRST_CONNECTION_TIMEOUT, and over at once when
    neither side has a path left. Each side's "no-path" event (runtime.DilationStatus) goes to the peer as
    `{"no-path": {...}}`; once the two reports mirror each other's hint counts, every hint has been tried on
    both sides and nothing can connect any more: both give up (exit 7), naming what each tried."""

    def __init__(self, w, role: str, on_status) -> None:
        self.w, self.role, self._on_status = w, role, on_status
        self.connected = asyncio.Event()
        self.ours: tuple | None = None  # (generation, hints sent, hints seen, tried)
        self.theirs: tuple | None = None
        self.failed: asyncio.Future = asyncio.get_running_loop().create_future()  # -> the TransitError
        self.guard = asyncio.ensure_future(self._guard())

    def status(self, s) -> None:
        if s.state == "connected":
            self.connected.set()
        elif s.state == "no-path" and s.hints is not None:
            self.ours = (s.generation, *s.hints, s.reason)
            self.w.send_message(json.dumps({"no-path": {"generation": s.generation, "sent": s.hints[0],
                                                        "seen": s.hints[1], "tried": s.reason}}).encode())
            self._compare()
        self._on_status(s)

    def peer_message(self, msg: dict) -> bool:
        """Takes the peer's no-path report (True), else leaves `msg` to the caller (False)."""
        report = msg.get("no-path")
        if not isinstance(report, dict):
            return False
        try:
            self.theirs = (int(report["generation"]), int(report["sent"]), int(report["seen"]),
                           str(report.get("tried", "no path"))[:1000])
        except (KeyError, TypeError, ValueError):
            return True
        self._compare()
        return True

    def fail(self, error: Exception) -> None:
        if not self.failed.done():
            self.failed.set_result(error)

    def _compare(self) -> None:
        if self.ours is None or self.theirs is None or self.connected.is_set():
            return
        generation, sent, seen, tried = self.ours
        if self.theirs[:3] == (generation, seen, sent):
            peer = "receiver" if self.role == "sender" else "sender"
            self.fail(TransitError(f"no transit path works: tried {tried}; the {peer} tried {self.theirs[3]}"))

    async def _guard(self) -> None:
        connected = asyncio.ensure_future(self.connected.wait())
        try:
            await asyncio.wait({connected, self.failed}, timeout=FIRST_CONNECTION_TIMEOUT,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            connected.cancel()
        if self.connected.is_set():
            return
        if not self.failed.done():
            why = f"no Dilation connection within {FIRST_CONNECTION_TIMEOUT:g} s"
            self.w.send_message(json.dumps({"error": f"the {self.role} {NO_PATH} ({why})"}).encode())
            self.fail(TransitError(f"no transit path works: {why}"))
        raise self.failed.result()


async def _send(w, args, paths: list[Path], on_status) -> Report:
    """Dilate, offer `paths`, and wait for the receiver; its `{"error": ...}` (Ctrl-C at its question) wins
    over our broken subchannel."""
    progress = _Progress(not args.hide_progress, sum(_size(p) for p in paths))
    watch = _Watch(w, "sender", on_status)
    guard = watch.guard
    sending = asyncio.ensure_future(
        send_on(w, paths, parallel=getattr(args, "parallel", 8), listen=not args.no_listen,
                progress=progress if progress.bar.enabled else None, on_status=watch.status))
    watching = asyncio.ensure_future(_peer_error(w, watch))
    try:
        while not (sending.done() or watching.done()):  # the guard ends quietly once connected
            await asyncio.wait({sending, watching, *([] if guard.done() else [guard])},
                               return_when=asyncio.FIRST_COMPLETED)
            if guard.done() and guard.exception() is not None:
                raise guard.exception()
        if sending.done() and sending.exception() is not None and not watching.done():
            # the receiver's stop can end our subchannels before its reason arrives by the mailbox
            await asyncio.wait({watching}, timeout=PEER_REASON_WAIT)
        if watching.done() and watching.result() is not None and (not sending.done() or sending.exception()):
            sending.cancel()  # the receiver gave up (Ctrl-C, no path...): its reason, not our broken subchannel
            error = TransitError if NO_PATH in watching.result() else TransferError
            raise error(f"remote error: {watching.result()}")
        return await sending
    finally:
        for t in (watching, sending, guard):
            t.cancel()
        progress.bar.finish()


async def _peer_error(w, watch: _Watch) -> str | None:
    """The peer's `{"error": ...}` mailbox message (a receiver stopped at its question), or None; its no-path
    reports go to `watch`."""
    from burrow.client.errors import WormholeError

    while True:
        try:
            msg = json.loads(await w.get_message())
        except (WormholeError, ValueError):
            return None
        if isinstance(msg, dict) and "error" in msg:
            return str(msg["error"])
        if isinstance(msg, dict):
            watch.peer_message(msg)


async def _sender_gave_up(w, watch: _Watch) -> None:
    """Receiver: the sender's reports; its "found no transit path" ends our wait too."""
    error = await _peer_error(w, watch)
    if error is not None and NO_PATH in error:
        watch.fail(TransitError(f"remote error: {error}"))


async def receive_dilated(w, args, ask: Callable[[str], Awaitable[bool]] | None = None) -> int:
    """Receive a Dilated sender's offers with a classic receiver's questions and lines: "Receive file 'x' (1 MB)
    into DEST? (y/N)" (none with --accept-file), "DEST already exists." and no overwriting without a yes on a
    terminal, free space checked. With a one-path sender `-o` is the target's path, else the folder for all.
    A rejected one-path offer ends with TransferRejected, as a classic transfer does."""
    import shutil

    from burrow.client.apps.progress import human
    from burrow.client.apps.receive import safe_name

    one = one_path_sender(w.peer_versions)
    output = Path(args.output_file) if getattr(args, "output_file", None) else None
    folder = output if output is not None and not one else Path.cwd()
    folder.mkdir(parents=True, exist_ok=True)
    accept_all = getattr(args, "accept_file", False)
    why: list[str] = []  # why the last offer was refused
    placed: dict[str, Path] = {}
    progress = _Progress(not getattr(args, "hide_progress", False), 0)  # each accepted offer adds its size

    async def place(name: str, size: int, is_dir: bool, timestamp: int) -> Path | str | None:
        dest = (output if one and output is not None else folder / safe_name(name)).absolute()
        if not one and have(dest, size, timestamp):
            return ALREADY_HAVE  # a re-run of `send --dilated A B` sends only what is missing
        exists = dest.exists() or dest.is_symlink()
        what = f"{'directory' if is_dir else 'file'} {name!r} ({human(size)})"
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(dest.parent).free
        except OSError as e:  # tell the sender rather than leave it waiting
            w.send_message(json.dumps({"error": "transfer rejected: the receiver cannot write there "
                                                f"({e.strerror or e})"}).encode())
            raise
        if free < size:
            why.append(f"insufficient free space: {free} bytes free, {size} needed")
        elif exists and not is_dir and dest.is_dir():
            why.append(f"{dest} is a directory")
        elif exists:
            _say(f"{dest} already exists.")
            if accept_all or ask is None or not sys.stdin.isatty() or not await ask(
                    f"Overwrite {dest} with the {what}? (y/N) "):
                why.append(f"refusing to overwrite {dest}")
        elif not accept_all and (ask is None or not await ask(f"Receive {what} into {dest}? (y/N) ")):
            why.append("transfer rejected")
        if why:
            return None
        placed[name] = dest
        progress.total += size
        status.release()
        return dest

    status = _FirstConnection("Receiving", held=True)
    watch = _Watch(w, "receiver", status)
    guard, watching = watch.guard, asyncio.ensure_future(_sender_gave_up(w, watch))
    want = getattr(args, "sha256", False) or sender_needs_sha256(w.peer_versions)
    # receive_on runs in this task, so that Ctrl-C here closes Dilation (telling the sender) before the CLI
    # sends its reason; the guard, when it fires, cancels this task and its error is raised instead
    me = asyncio.current_task()
    guard.add_done_callback(lambda g: me.cancel() if not g.cancelled() and g.exception() is not None else None)
    try:
        report = await receive_on(w, folder, place=place, listen=not args.no_listen, on_status=watch.status,
                                  progress=progress if progress.bar.enabled else None, sha256=want,
                                  on_text=lambda t: _say(f"peer says: {t}"))
    except asyncio.CancelledError:
        if guard.done() and not guard.cancelled() and guard.exception() is not None:
            me.uncancel()
            raise guard.exception() from None
        raise
    finally:
        guard.cancel()
        watching.cancel()
        progress.bar.finish()
    if one and report.rejected:
        raise TransferRejected(why[-1] if why else "transfer rejected")
    if one and placed:
        name, dest = next(iter(placed.items()))
        digest = report.sha256.get(name, "")
        kind = "directory" if dest.is_dir() else "file"
        _say(f"Received {kind} written to {dest}" + (f" (sha256 {digest})" if digest else ""))
        return 0
    _summary(report, "Received")
    return 5 if report.rejected else 0
