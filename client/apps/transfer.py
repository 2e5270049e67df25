"""File transfer v1 (magic-wormhole's CLI protocol): text, a file, or a directory as a zip.

Messages (JSON in numbered phases): sender {"transit": {...}} then {"offer": {...}}; receiver
{"transit": {...}} and {"answer": {"file_ack"|"message_ack": "ok"}} or {"error": "..."}. After the
file bytes over Transit, the receiver sends one record {"ack": "ok", "sha256": hex} and closes.
Files are streamed in RECORD_SIZE records; neither side ever holds a whole file in memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from burrow.client.errors import PeerGoneError, TransferError, TransitError
from burrow.client.wormhole import APPID, Wormhole

if TYPE_CHECKING:  # transit is imported where a file moves: a text transfer never loads it
    from burrow.client.transit.aio import RecordPipe, Transit

TRANSIT_KEY_PURPOSE = APPID + "/transit-key"  # always the default appid (magic-wormhole bug #339)
RECORD_SIZE = 256 * 1024  # plaintext bytes per transit record
ZIP_COPY_CHUNK = 1024 * 1024  # bytes per read while zipping / unzipping
MAX_TEXT = 1024 * 1024  # bytes of text message we accept for display

Progress = Callable[[int, int], None]


def _noop(done: int, total: int) -> None:
    pass


@dataclass(frozen=True)
class Offer:
    kind: str  # "text" | "file" | "directory"
    name: str = ""
    size: int = 0  # bytes on the wire (file size or zip size)
    numbytes: int = 0  # directory: uncompressed bytes
    numfiles: int = 0
    text: str = ""

    def encode(self) -> dict:
        if self.kind == "text":
            return {"offer": {"message": self.text}}
        if self.kind == "file":
            return {"offer": {"file": {"filename": self.name, "filesize": self.size}}}
        return {"offer": {"directory": {"mode": "zipfile/deflated", "dirname": self.name, "zipsize": self.size,
                                        "numbytes": self.numbytes, "numfiles": self.numfiles}}}

    @classmethod
    def decode(cls, offer: dict) -> Offer:
        try:
            if "message" in offer:
                return cls("text", text=str(offer["message"]))
            if "file" in offer:
                f = offer["file"]
                return cls("file", name=str(f["filename"]), size=int(f["filesize"]))
            if "directory" in offer:
                d = offer["directory"]
                if not str(d.get("mode", "")).startswith("zipfile"):
                    raise TransferError(f"unknown directory mode {d.get('mode')!r}")
                return cls("directory", name=str(d["dirname"]), size=int(d["zipsize"]),
                           numbytes=int(d["numbytes"]), numfiles=int(d["numfiles"]))
        except (KeyError, TypeError, ValueError) as e:
            raise TransferError(f"malformed offer: {e}") from e
        raise TransferError("unknown offer type")


NO_TRANSIT_PATH = "found no transit path"  # in the error a side sends the other when its connect() gave up


def _send(w: Wormhole, data: dict) -> None:
    w.send_message(json.dumps(data).encode("utf-8"))


async def _recv(w: Wormhole) -> dict:
    raw = await w.get_message()
    try:
        msg = json.loads(raw)
    except ValueError as e:
        raise TransferError("peer sent a message that is not JSON") from e
    if not isinstance(msg, dict):
        raise TransferError("peer sent a message that is not a JSON object")
    if "error" in msg:
        raise TransferError(f"remote error: {msg['error']}")
    return msg


# ---- sending ---------------------------------------------------------------------------------

def zip_directory(path: Path, out: Path) -> tuple[int, int]:
    """Write `path` as a deflated zip to `out` (streamed, never whole files in memory).

    Returns (numbytes, numfiles). Empty directories are kept; symlinks are followed like magic-wormhole.
    """
    numbytes = numfiles = 0
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1, allowZip64=True) as zf:
        for root, dirs, files in os.walk(path, followlinks=True):
            dirs.sort()
            rel_root = os.path.relpath(root, path)
            if not files and not dirs and rel_root != ".":
                zf.write(root, rel_root + "/")
            for name in sorted(files):
                full = os.path.join(root, name)
                arc = os.path.normpath(os.path.join(rel_root, name))
                zf.write(full, arc)  # zipfile streams the file in chunks
                numbytes += os.path.getsize(full)
                numfiles += 1
    return numbytes, numfiles


async def send_text(w: Wormhole, text: str) -> None:
    await w.get_verifier()  # never offer anything before the peer proved it has the same key
    _send(w, Offer("text", text=text).encode())
    while True:
        msg = await _recv(w)
        if "answer" in msg:
            if msg["answer"].get("message_ack") != "ok":
                raise TransferError(f"text not acknowledged: {msg['answer']!r}")
            return


def prepare_transit() -> None:
    """Load transit while the code exchange runs: on the sender a file will follow, on the receiver one may."""
    import burrow.client.transit.aio  # noqa: F401 - imported for its cost, here rather than later


async def early_transit(w: Wormhole, role: str, *, no_listen: bool = False, ready=None) -> Transit:
    """A Transit that listens and starts looking up its NAT's address at once (Transit.listen_early), so that
    the lookup's wait runs beside the key exchange rather than after it. `ready`: the transit import running
    in a thread (prepare_transit), awaited first. Give it to send_path or ReceiveOptions, which close it once
    connected; the caller closes it in any case with discard_transit (closing twice is harmless)."""
    if ready is not None:
        await ready
    from burrow.client.transit.aio import Transit

    transit = Transit(role, transit_helper=w.transit_helper, no_listen=no_listen, nat=getattr(w, "nat", None))
    transit.listen_early()
    return transit


async def take_transit(early: asyncio.Future) -> Transit | None:
    """The early_transit(), or None when it could not listen (send_path / receive then make their own, and
    fail there only if a file needs it)."""
    try:
        return await early
    except OSError:
        return None


async def discard_transit(early: asyncio.Future | None) -> None:
    """Close an early_transit() nobody took over (a text, a Dilated peer, an error before the transfer)."""
    if early is None:
        return
    if not early.done():
        early.cancel()
    elif not early.cancelled() and early.exception() is None:
        await early.result().close()


async def send_path(w: Wormhole, path: Path, *, no_listen: bool = False, progress: Progress = _noop,
                    on_connected: Callable[[str], None] | None = None, workdir: Path | None = None,
                    on_acknowledged: Callable[[str], None] | None = None,
                    transit: Transit | None = None) -> str:
    """Send a file or directory; return the transit description. Raises TransferError on failure.

    The sender does not hash the file: every record is authenticated (XSalsa20-Poly1305 under a key only the
    two peers hold, with sequential nonces, so nothing can be altered, dropped or reordered unnoticed) and
    the receiver acknowledges only once it has all of it. `on_acknowledged` gets the SHA-256 the receiver
    reports for what it wrote, for the user to compare if they wish. `transit`: an early_transit() to use
    instead of a new one.
    """
    await w.get_verifier()
    tmp = None
    try:
        if path.is_dir():
            tmp = tempfile.NamedTemporaryFile(prefix="burrow-", suffix=".zip", dir=workdir, delete=False)  # noqa: SIM115
            tmp.close()
            numbytes, numfiles = await asyncio.to_thread(zip_directory, path, Path(tmp.name))
            source = Path(tmp.name)
            offer = Offer("directory", path.resolve().name, source.stat().st_size, numbytes, numfiles)
        elif path.is_file():
            source = path
            offer = Offer("file", path.name, path.stat().st_size)
        else:
            raise TransferError(f"{path} is neither a file nor a directory")
        from burrow.client.transit.aio import Transit
        from burrow.client.transit.protocol import ABILITIES, TRANSIT_KEY_LENGTH

        if transit is None:
            transit = Transit("sender", transit_helper=w.transit_helper, no_listen=no_listen,
                              nat=getattr(w, "nat", None))
        try:
            hints = await transit.get_hints()
            _send(w, {"transit": {"abilities-v1": ABILITIES, "hints-v1": hints}})
            transit.set_key(w.derive_key(TRANSIT_KEY_PURPOSE, TRANSIT_KEY_LENGTH))
            _send(w, offer.encode())
            while True:
                msg = await _recv(w)
                if "transit" in msg:
                    transit.add_peer_transit(msg["transit"])
                if "answer" in msg:
                    if msg["answer"].get("file_ack") != "ok":
                        raise TransferError(f"transfer not accepted: {msg['answer']!r}")
                    break
            pipe = await connect_unless_peer_gives_up(w, transit)
        finally:
            await transit.close()
        if on_connected:
            on_connected(pipe.description)
        try:
            await _stream_out(pipe, source, offer.size, progress)
            try:
                ack = json.loads(await pipe.receive_record())
            except TransitError as e:
                raise PeerGoneError("the receiver closed before acknowledging the transfer") from e
            if ack.get("ack") != "ok":
                raise TransferError(f"transfer failed (remote says {ack!r})")
            if on_acknowledged:
                on_acknowledged(str(ack.get("sha256", "")))
        finally:
            await pipe.close()
        return pipe.description
    finally:
        if tmp is not None:
            os.unlink(tmp.name)


async def connect_unless_peer_gives_up(w: Wormhole, transit: Transit) -> RecordPipe:
    """transit.connect(), ended early by the peer's `{"error": ...}` (it found no path, or its user quit).

    When our own attempts all fail we tell the peer, which may be waiting for us at a relay.
    """
    connecting = asyncio.ensure_future(_connect_or_tell(w, transit))
    while True:
        peer = asyncio.ensure_future(_recv(w))
        try:
            await asyncio.wait({connecting, peer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not peer.done():
                peer.cancel()
        if connecting.done():
            if peer.done() and not peer.cancelled():
                peer.exception()  # the peer's error raced our own result: ours is the one reported
            return connecting.result()
        try:
            peer.result()  # raises TransferError for the receiver's error; other messages are not for now
        except TransferError as e:
            _abandon(connecting)
            if NO_TRANSIT_PATH in str(e):
                raise TransitError(str(e)) from None
            raise
        except BaseException:
            _abandon(connecting)
            raise


def _abandon(task: asyncio.Future) -> None:
    """Cancel `task`; if its own failure races the cancellation, it is retrieved here, not logged as lost."""
    task.cancel()
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


async def _connect_or_tell(w: Wormhole, transit: Transit) -> RecordPipe:
    try:
        return await transit.connect()
    except TransitError as e:
        _send(w, {"error": f"the {transit.role} {NO_TRANSIT_PATH} ({e})"})
        raise


async def _stream_out(pipe: RecordPipe, source: Path, size: int, progress: Progress) -> None:
    """Read, seal and send in one worker thread (client/transit/bulk.py); the loop only reports progress."""
    progress(0, size)  # the first byte: the bar's rate is timed from here
    with open(source, "rb", buffering=0) as f:
        await pipe.send_file(f, size, RECORD_SIZE, lambda done: progress(done, size))
