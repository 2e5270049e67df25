"""Receiving side of file transfer v1, with the safety rules.

* Never writes outside the target folder: file names are reduced to a base name; every zip entry is
  checked (absolute paths, "..", drive letters, symlinks are refused) BEFORE anything is extracted.
* Never overwrites: an existing target is refused unless `confirm(..., exists=True)` says yes; the data
  lands in a temporary file next to the target and is linked into place only after the SHA-256 is known.
* Checks free disk space (file size, or zip size + uncompressed size) before accepting.
* Hashes what it writes (SHA-256, for the closing ack) unless the sender said it needs no digest
  (transfer_versions.sender_needs_sha256) and `ReceiveOptions.sha256` does not ask for one anyway.
* A zip that expands beyond the offered byte count is refused (zip bombs).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from burrow.client.apps.transfer import (
    MAX_TEXT,
    TRANSIT_KEY_PURPOSE,
    ZIP_COPY_CHUNK,
    Offer,
    Progress,
    _noop,
    _recv,
    _send,
    connect_unless_peer_gives_up,
)
from burrow.client.errors import TransferError, TransferRejected
from burrow.client.wormhole import Wormhole

if TYPE_CHECKING:  # transit is imported where a file moves: a text transfer never loads it
    from burrow.client.transit.aio import RecordPipe, Transit

Confirm = Callable[[Offer, Path, bool], bool | Awaitable[bool]]


def _accept_all(offer: Offer, dest: Path, exists: bool) -> bool:
    return not exists


@dataclass
class ReceiveOptions:
    output: Path | None = None  # target file (or directory) path; default: the offered name in cwd
    confirm: Confirm = _accept_all  # called before accepting a file/directory offer
    no_listen: bool = False
    progress: Progress = _noop
    on_offer: Callable[[Offer, Path], None] = field(default=lambda offer, dest: None)
    on_connected: Callable[[str], None] = field(default=lambda desc: None)
    transit: Transit | None = None  # an early_transit() (apps/transfer.py) to use instead of a new one
    sha256: bool = False  # hash the data even when the sender said it needs no digest


@dataclass(frozen=True)
class Received:
    offer: Offer
    path: Path | None = None  # None for text
    sha256: str = ""  # of the bytes received (the zip, for a directory); "" when not computed


def safe_name(name: str) -> str:
    base = os.path.basename(name.replace("\\", "/"))
    if base in ("", ".", "..") or "\x00" in base:
        raise TransferRejected(f"refusing unsafe name {name!r}")
    return base


def check_zip(zf: zipfile.ZipFile, limit: int) -> None:
    """Refuse entries that would escape the target or expand beyond `limit` bytes."""
    total = 0
    for info in zf.infolist():
        name = info.filename
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or ".." in parts or (len(name) > 1 and name[1] == ":") or "\x00" in name:
            raise TransferRejected(f"refusing zip entry outside the target folder: {name!r}")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise TransferRejected(f"refusing symlink in zip: {name!r}")
        total += info.file_size
    if total > limit:
        raise TransferRejected(f"zip expands to {total} bytes, more than the {limit} offered")


def extract_zip(zip_path: Path, dest: Path, limit: int) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    with zipfile.ZipFile(zip_path) as zf:
        check_zip(zf, limit)
        written = 0
        for info in zf.infolist():
            target = (root / info.filename).resolve()
            if os.path.commonpath([root, target]) != str(root):
                raise TransferRejected(f"refusing zip entry outside the target folder: {info.filename!r}")
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "xb") as out:
                while chunk := src.read(ZIP_COPY_CHUNK):
                    written += len(chunk)
                    if written > limit:
                        raise TransferRejected("zip expands beyond its declared size")
                    out.write(chunk)
            mode = info.external_attr >> 16
            if mode & 0o111:
                os.chmod(target, 0o755)


async def _ask(confirm: Confirm, offer: Offer, dest: Path, exists: bool) -> bool:
    res = confirm(offer, dest, exists)
    if inspect.isawaitable(res):
        res = await res
    return bool(res)


async def receive(w: Wormhole, opts: ReceiveOptions | None = None) -> Received:
    opts = opts or ReceiveOptions()
    await w.get_verifier()
    transit: Transit | None = None

    async def ensure_transit(peer_transit: dict) -> Transit:
        nonlocal transit
        if transit is None:
            from burrow.client.transit.aio import Transit
            from burrow.client.transit.protocol import ABILITIES, TRANSIT_KEY_LENGTH

            transit = opts.transit or Transit("receiver", transit_helper=w.transit_helper,
                                              no_listen=opts.no_listen, nat=getattr(w, "nat", None))
            transit.set_key(w.derive_key(TRANSIT_KEY_PURPOSE, TRANSIT_KEY_LENGTH))
            transit.add_peer_transit(peer_transit)
            hints = await transit.get_hints()
            _send(w, {"transit": {"abilities-v1": ABILITIES, "hints-v1": hints}})
        else:
            transit.add_peer_transit(peer_transit)
        return transit

    try:
        while True:
            msg = await _recv(w)
            if "transit" in msg and isinstance(msg["transit"], dict):
                await ensure_transit(msg["transit"])
            if "offer" in msg:
                try:
                    offer = Offer.decode(msg["offer"])
                except TransferError as e:
                    _send(w, {"error": str(e)})
                    raise
                if offer.kind == "text":
                    _send(w, {"answer": {"message_ack": "ok"}})
                    return Received(Offer("text", text=offer.text[:MAX_TEXT]))
                t = await ensure_transit({})
                return await _receive_data(w, t, offer, opts)
    finally:
        if transit is not None:
            await transit.close()


async def accept_offer(w: Wormhole, offer: Offer, opts: ReceiveOptions) -> tuple[Path, bool]:
    """The safety checks and the user's yes before any byte of a file or directory lands: returns the target
    and whether it exists (the user agreed to overwrite). A refusal is told to the sender and raised."""
    dest = opts.output if opts.output is not None else Path.cwd() / safe_name(offer.name)
    dest = dest.absolute()
    exists = dest.exists() or dest.is_symlink()
    opts.on_offer(offer, dest)
    need = offer.size + (offer.numbytes if offer.kind == "directory" else 0)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(dest.parent).free
        if free < need:
            raise TransferRejected(f"insufficient free space: {free} bytes free, {need} needed")
        if exists and offer.kind == "file" and dest.is_dir():
            raise TransferRejected(f"{dest} is a directory")
        if not await _ask(opts.confirm, offer, dest, exists):
            raise TransferRejected(f"refusing to overwrite {dest}" if exists else "transfer rejected")
    except TransferRejected:
        _send(w, {"error": "transfer rejected"})
        raise
    except OSError as e:  # cannot create the target's folder: tell the sender rather than leave it waiting
        _send(w, {"error": f"transfer rejected: the receiver cannot write there ({e.strerror or e})"})
        raise
    return dest, exists


def place(tmp: Path, dest: Path, exists: bool) -> None:
    """Move a complete file from its temporary name to `dest`."""
    if exists:
        os.replace(tmp, dest)  # the user agreed to overwrite
    else:
        os.link(tmp, dest)  # fails rather than clobber a file that appeared meanwhile


def temporary_beside(dest: Path) -> tuple[int, Path]:
    fd, tmpname = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".burrow-part", dir=dest.parent)
    return fd, Path(tmpname)


async def _receive_data(w: Wormhole, transit: Transit, offer: Offer, opts: ReceiveOptions) -> Received:
    from burrow.client.apps.transfer_versions import sender_needs_sha256
    from burrow.client.transit.protocol import ack_record

    dest, exists = await accept_offer(w, offer, opts)
    _send(w, {"answer": {"file_ack": "ok"}})
    pipe = await connect_unless_peer_gives_up(w, transit)
    opts.on_connected(pipe.description)
    fd, tmp = temporary_beside(dest)
    try:
        with os.fdopen(fd, "wb", buffering=0) as f:
            want = opts.sha256 or sender_needs_sha256(w.peer_versions)
            digest = await _stream_in(pipe, f, offer.size, opts.progress, want)
        if offer.kind == "directory":
            await asyncio.to_thread(extract_zip, tmp, dest, offer.numbytes)
        else:
            place(tmp, dest, exists)
        await pipe.send_record(ack_record(digest))
    finally:
        tmp.unlink(missing_ok=True)
        await pipe.close()
    return Received(offer, dest, digest)


async def _stream_in(pipe: RecordPipe, f, size: int, progress: Progress, sha256: bool) -> str:
    """Receive, open, hash (if `sha256`) and write in worker threads (client/transit/bulk.py); returns the
    SHA-256, or "" when not computed."""
    progress(0, size)  # the first byte: the bar's rate is timed from here
    return await pipe.receive_file(f, size, lambda done: progress(done, size), sha256)


def text_of(received: Received) -> str:
    """The text on one line with control characters escaped (terminal safety, like magic-wormhole)."""
    if received.offer.kind != "text":
        return ""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in received.offer.text)
