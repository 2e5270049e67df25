"""Dilated File-Transfer (magic-wormhole-protocols `dilated-file-transfer.md`, feature "core0") on burrow's Dilation.

Versions: each side puts `{"transfer": {"mode": "send"|"receive"|"connect", "features": ["core0"],
"permission": "ask"|"yes"}}` in `app_versions`. Every offer runs on its own subchannel of subprotocol
"transfer", opened by the offering side; up to `parallel` offers run at once. Messages on a subchannel are
`kind byte || payload`: 0x01 FileOffer{filename, timestamp, bytes}, 0x02 DirectoryOffer{base, size, files},
0x03 OfferAccept, 0x04 OfferReject{reason}, 0x05 file data (<= 65535 bytes), 0x06 FileAcknowledge{bytes,
sha256} (what the experimental magic-wormhole implementation adds); msgpack payloads. Subchannels are byte
streams in magic-wormhole 0.24 and here, so each message is preceded by a 4-byte big-endian length.
A control subchannel "transfer-control" carries msgpack `{"kind": "text", "message"}` and burrow's
`{"kind": "done", "offers": n}` that ends a one-way session (unknown kinds are ignored, as the draft asks).

Resuming: a broken connection is Dilation's business (L4 re-sends what was not acknowledged, nothing is sent
twice). Across sessions, the receiver writes `<name>.part` and renames on completion; a re-offered file that
already exists with the offered size and timestamp is rejected with "already have it" and the sender skips
it, so a re-run only sends what is missing.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import msgpack

from burrow.client import errors
from burrow.client.apps.transfer_versions import FEATURES, app_versions, peer_transfer  # noqa: F401

SUBPROTOCOL = "transfer"
CONTROL = "transfer-control"
MAX_MESSAGE = 16 * 1024 * 1024  # bytes per framed message we accept (offers carry file lists)
DATA_CHUNK = 65535  # file bytes per 0x05 message (the draft caps a message at 65536 with its kind byte)
WRITE_BATCH = 4  # data messages per subchannel write
FILE_BATCH = 16  # data messages read (sender) or written (receiver) per worker-thread call: 1 MiB
ALREADY_HAVE = "already have it"

FILE_OFFER, DIRECTORY_OFFER, ACCEPT, REJECT, DATA, ACK = 1, 2, 3, 4, 5, 6
_LEN = struct.Struct(">L")


class TransferError(errors.TransferError):
    pass


def encode(kind: int, body=None) -> bytes:
    payload = bytes([kind]) + (b"" if body is None else body if kind == DATA else msgpack.packb(body))
    return _LEN.pack(len(payload)) + payload


def encode_control(body: dict) -> bytes:
    payload = msgpack.packb(body)
    return _LEN.pack(len(payload)) + payload


async def read_control(reader) -> dict | None:
    try:
        (n,) = _LEN.unpack(await reader.readexactly(4))
    except asyncio.IncompleteReadError:
        return None
    if not 1 <= n <= MAX_MESSAGE:
        raise TransferError(f"bad control message length {n}")
    try:
        body = msgpack.unpackb(await reader.readexactly(n))
    except asyncio.IncompleteReadError:
        return None
    except Exception as e:
        raise TransferError(f"bad control message: {e}") from None
    return body if isinstance(body, dict) else {}


_HEAD = struct.Struct(">LB")  # length, kind


async def read_message(reader) -> tuple[int, object] | None:
    try:
        n, kind = _HEAD.unpack(await reader.readexactly(5))
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise TransferError("truncated message") from None
        return None
    if not 1 <= n <= MAX_MESSAGE:
        raise TransferError(f"bad message length {n}")
    raw = await reader.readexactly(n - 1) if n > 1 else b""  # DATA: the file bytes, not copied again
    if kind == DATA:
        return kind, raw
    if kind == ACCEPT:
        return kind, None
    try:
        body = msgpack.unpackb(raw)
    except Exception as e:
        raise TransferError(f"bad msgpack in message kind {kind}: {e}") from None
    return kind, body


def safe_relative(name: str) -> PurePosixPath:
    p = PurePosixPath(name)
    if not name or p.is_absolute() or any(part in ("..", "") for part in p.parts) or "\\" in name:
        raise TransferError(f"unsafe path in offer: {name!r}")
    return p


@dataclass
class Report:
    sent: list[str] = field(default_factory=list)
    received: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    data_bytes: int = 0  # file bytes written to subchannels (sender) or to disk (receiver)
    sha256: dict[str, str] = field(default_factory=dict)  # name -> SHA-256 the receiver computed (when it did)


# ------------------------------------------------------------------ sending
def _read_batch(fd: int, offset: int) -> list[bytes]:
    """Up to FILE_BATCH data messages' worth of the file from `offset` (in a worker thread)."""
    chunks = []
    for _ in range(FILE_BATCH):
        chunk = os.pread(fd, DATA_CHUNK, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return chunks


def _data_messages(chunks: list[bytes]) -> bytes:
    """Framed 0x05 messages, joined with one copy of the data."""
    parts = []
    for c in chunks:
        parts += (_LEN.pack(len(c) + 1), b"\x05", c)
    return b"".join(parts)


async def _write_file(writer, path: Path, report: Report, progress: Callable[[int], None] | None) -> None:
    """The sender hashes nothing: every record is authenticated in order by Dilation's Noise session and the
    receiver acknowledges the byte count (the SHA-256 it may add is reported, as classic transfers do). A
    worker thread reads the next MiB while the event loop seals and sends this one."""
    loop = asyncio.get_running_loop()
    with path.open("rb") as f:
        offset = 0
        ahead = loop.run_in_executor(None, _read_batch, f.fileno(), offset)
        try:
            while chunks := await ahead:
                offset += sum(map(len, chunks))
                ahead = loop.run_in_executor(None, _read_batch, f.fileno(), offset)
                for i in range(0, len(chunks), WRITE_BATCH):
                    batch = chunks[i:i + WRITE_BATCH]
                    writer.write(_data_messages(batch))
                    n = sum(map(len, batch))
                    report.data_bytes += n
                    if progress:
                        progress(n)
                    await writer.drain()
        finally:
            if not ahead.done():  # the file closes below: let the read in flight finish first
                await asyncio.wait([ahead])


async def _expect_ack(reader, size: int, name: str, report: Report) -> None:
    msg = await read_message(reader)
    if msg is None or msg[0] != ACK:
        raise TransferError(f"expected FileAcknowledge, got {msg and msg[0]}")
    body = msg[1]
    if not isinstance(body, dict) or body.get("bytes") != size:
        raise TransferError(f"receiver acknowledged {body}, we sent {size} bytes")
    if isinstance(body.get("sha256"), str):
        report.sha256[name] = body["sha256"]


async def offer_file(dilated, path: Path, *, wait_answer: bool, report: Report, name: str | None = None,
                     progress: Callable[[int], None] | None = None) -> None:
    st = path.stat()
    name = name or path.name
    reader, writer = await dilated.open(SUBPROTOCOL)
    try:
        writer.write(encode(FILE_OFFER, {"filename": name, "timestamp": int(st.st_mtime), "bytes": st.st_size}))
        if wait_answer:
            answer = await read_message(reader)
            if answer is None or answer[0] not in (ACCEPT, REJECT):
                raise TransferError(f"expected an answer to the offer of {name}")
            if answer[0] == REJECT:
                reason = answer[1].get("reason", "") if isinstance(answer[1], dict) else ""
                (report.skipped if reason == ALREADY_HAVE else report.rejected).append(name)
                return
        await _write_file(writer, path, report, progress)
        await _expect_ack(reader, st.st_size, name, report)
        report.sent.append(name)
    finally:
        writer.close()


async def offer_directory(dilated, root: Path, *, wait_answer: bool, report: Report,
                          progress: Callable[[int], None] | None = None) -> None:
    files = sorted(p for p in root.rglob("*") if p.is_file())
    rels = [p.relative_to(root).as_posix() for p in files]
    reader, writer = await dilated.open(SUBPROTOCOL)
    try:
        writer.write(encode(DIRECTORY_OFFER, {"base": root.name, "size": sum(p.stat().st_size for p in files),
                                              "files": rels}))
        if wait_answer:
            answer = await read_message(reader)
            if answer is None or answer[0] == REJECT:
                report.rejected.append(root.name)
                return
        for p, rel in zip(files, rels, strict=True):
            st = p.stat()
            writer.write(encode(FILE_OFFER, {"filename": rel, "timestamp": int(st.st_mtime), "bytes": st.st_size}))
            await _write_file(writer, p, report, progress)
            await _expect_ack(reader, st.st_size, f"{root.name}/{rel}", report)
            report.sent.append(f"{root.name}/{rel}")
    finally:
        writer.close()


async def send_files(dilated, paths: list[Path], *, peer: dict, parallel: int = 8,
                     progress: Callable[[int], None] | None = None) -> Report:
    """Offer every path (files in parallel, up to `parallel` subchannels), then send "done"."""
    if peer.get("mode") == "send":
        raise TransferError("the peer only sends; it will not accept offers")
    wait = peer.get("permission") != "yes"
    report = Report()
    sem = asyncio.Semaphore(parallel)

    async def one(p: Path) -> None:
        async with sem:
            if p.is_dir():
                await offer_directory(dilated, p, wait_answer=wait, report=report, progress=progress)
            else:
                await offer_file(dilated, p, wait_answer=wait, report=report, progress=progress)

    await asyncio.gather(*(one(p) for p in paths))
    _, control = await dilated.open(CONTROL)
    control.write(encode_control({"kind": "done", "offers": len(paths)}))
    control.close()
    return report


# ------------------------------------------------------------------ receiving
Accept = Callable[[str, int, bool], Awaitable[bool]]  # (name, size, is_directory) -> accept?
# (name, size, is_directory, timestamp) -> where the file (or the directory's root) goes, ALREADY_HAVE to skip
# it, or None to reject it
Place = Callable[[str, int, bool, int], Awaitable[Path | str | None]]


async def _receive_one_file(reader, writer, dest: Path, size: int, timestamp: int, report: Report,
                            progress: Callable[[int], None] | None, sha256: bool = True, name: str = "") -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    h, got = hashlib.sha256() if sha256 else None, 0
    loop = asyncio.get_running_loop()
    with part.open("wb") as f:
        writing = None  # one batch at a time in a worker thread (hash and write), while the loop reads the next

        def store(batch: list[bytes]) -> None:
            for data in batch:
                if h is not None:
                    h.update(data)
                f.write(data)

        try:
            batch: list[bytes] = []
            while got < size:
                msg = await read_message(reader)
                if msg is None or msg[0] != DATA:
                    raise TransferError(f"{dest.name}: stream ended after {got} of {size} bytes")
                data = msg[1]
                got += len(data)
                if got > size:
                    raise TransferError(f"{dest.name}: more data than offered")
                batch.append(data)
                if progress:
                    progress(len(data))
                if len(batch) >= FILE_BATCH or got == size:
                    if writing is not None:
                        await writing
                    writing, batch = loop.run_in_executor(None, store, batch), []
            if writing is not None:
                await writing
        finally:
            if writing is not None and not writing.done():  # the file closes below
                await asyncio.wait([writing])
    if dest.exists() or dest.is_symlink():
        os.replace(part, dest)  # the user agreed to overwrite it
    else:
        os.link(part, dest)  # fails rather than clobber a file that appeared meanwhile
        part.unlink()
    if timestamp:
        os.utime(dest, (time.time(), timestamp))
    report.data_bytes += got
    if h is None:
        writer.write(encode(ACK, {"bytes": got}))
        return
    report.sha256[name or dest.name] = h.hexdigest()
    writer.write(encode(ACK, {"bytes": got, "sha256": report.sha256[name or dest.name]}))


def have(dest: Path, size: int, timestamp: int) -> bool:
    try:
        st = dest.stat()
    except OSError:
        return False
    return st.st_size == size and int(st.st_mtime) == timestamp


async def handle_offer(reader, writer, out_dir: Path, *, permission: str, accept: Accept | None, report: Report,
                       progress: Callable[[int], None] | None = None, place: Place | None = None,
                       sha256: bool = True) -> None:
    """Serve one offer. `place` (instead of `accept` and `out_dir`) names each offer's destination, or rejects
    it; `sha256=False` acknowledges without hashing (a sender that said it needs no digest)."""
    try:
        first = await read_message(reader)
        if first is None:
            return
        kind, body = first
        if kind == FILE_OFFER:
            name, size, ts = str(body["filename"]), int(body["bytes"]), int(body.get("timestamp") or 0)
            dest = out_dir / safe_relative(name).name
            if place is not None:
                dest = await place(name, size, False, ts)
                if not isinstance(dest, Path):
                    writer.write(encode(REJECT, {"reason": dest or "transfer rejected"}))
                    (report.skipped if dest == ALREADY_HAVE else report.rejected).append(name)
                    return
                writer.write(encode(ACCEPT))
            elif permission == "ask":
                if have(dest, size, ts):
                    writer.write(encode(REJECT, {"reason": ALREADY_HAVE}))
                    report.skipped.append(name)
                    return
                if accept is not None and not await accept(name, size, False) or dest.exists():
                    writer.write(encode(REJECT, {"reason": "transfer rejected"}))
                    report.rejected.append(name)
                    return
                writer.write(encode(ACCEPT))
            await _receive_one_file(reader, writer, dest, size, ts, report, progress, sha256, name)
            report.received.append(name)
        elif kind == DIRECTORY_OFFER:
            base = safe_relative(str(body["base"])).name
            files = [safe_relative(str(f)) for f in body["files"]]
            root = out_dir / base
            if place is not None:
                root = await place(base, int(body["size"]), True, 0)
                if not isinstance(root, Path):
                    writer.write(encode(REJECT, {"reason": "transfer rejected"}))
                    report.rejected.append(base)
                    return
                writer.write(encode(ACCEPT))
            elif permission == "ask":
                if accept is not None and not await accept(base, int(body["size"]), True):
                    writer.write(encode(REJECT, {"reason": "transfer rejected"}))
                    report.rejected.append(base)
                    return
                writer.write(encode(ACCEPT))
            for expected in files:
                msg = await read_message(reader)
                if msg is None or msg[0] != FILE_OFFER or safe_relative(str(msg[1]["filename"])) != expected:
                    raise TransferError(f"directory {base}: expected the FileOffer of {expected}")
                fo = msg[1]
                await _receive_one_file(reader, writer, root / expected, int(fo["bytes"]),
                                        int(fo.get("timestamp") or 0), report, progress, sha256,
                                        f"{base}/{expected}")
                report.received.append(f"{base}/{expected}")
        else:
            raise TransferError(f"first message on a transfer subchannel has kind {kind}")
    finally:
        writer.close()


async def receive_files(dilated, out_dir: Path, *, permission: str = "yes", accept: Accept | None = None,
                        progress: Callable[[int], None] | None = None,
                        on_text: Callable[[str], None] | None = None, place: Place | None = None,
                        sha256: bool = True) -> Report:
    """Serve offers until the peer says "done" and every offer it made has finished."""
    report = Report()
    offers = dilated.listen(SUBPROTOCOL)
    control = dilated.listen(CONTROL)
    tasks: list[asyncio.Task] = []
    done_total: list[int] = []

    async def serve_offers():
        async for reader, writer in offers:
            tasks.append(asyncio.ensure_future(handle_offer(
                reader, writer, out_dir, permission=permission, accept=accept, report=report, progress=progress,
                place=place, sha256=sha256)))

    async def serve_control():
        async for reader, writer in control:
            while (body := await read_control(reader)) is not None:
                if body.get("kind") == "done":
                    done_total.append(int(body.get("offers", 0)))
                elif body.get("kind") == "text" and on_text:
                    on_text(str(body.get("message")))
            writer.close()

    servers = [asyncio.ensure_future(serve_offers()), asyncio.ensure_future(serve_control())]
    try:
        while not done_total or len(tasks) < done_total[0] or not all(t.done() for t in tasks):
            await asyncio.sleep(0.05)
            for t in tasks:
                if t.done() and t.exception() is not None:
                    raise t.exception()
    finally:
        for t in servers:
            t.cancel()
    return report


# ------------------------------------------------------------------ whole sessions (for the CLI)
async def send_on(wormhole, paths: list[Path], *, parallel: int = 8, listen: bool = True,
                  progress: Callable[[int], None] | None = None,
                  on_status: Callable | None = None) -> Report:
    """On an open Wormhole built with `dilation=True, app_versions=app_versions("send")`
    whose code is set: dilate, offer every path, wait until the receiver has everything."""
    from burrow.client.dilation.aio import dilate

    peer = peer_transfer(await wormhole.get_peer_versions())
    if peer is None:
        raise TransferError("the peer does not speak Dilated File-Transfer (use classic `burrow send`)")
    dilated = await dilate(wormhole, listen=listen, on_status=on_status)
    try:
        report = await send_files(dilated, paths, peer=peer, parallel=parallel, progress=progress)
        await dilated.flush()
        return report
    finally:
        await dilated.close()


async def receive_on(wormhole, out_dir: Path, *, accept: Accept | None = None, listen: bool = True,
                     progress: Callable[[int], None] | None = None, on_status: Callable | None = None,
                     on_text: Callable[[str], None] | None = None, place: Place | None = None,
                     sha256: bool = True) -> Report:
    """The receiving side of send_on (the Wormhole carries `app_versions=app_versions("receive", "ask")`)."""
    from burrow.client.dilation.aio import dilate

    if peer_transfer(await wormhole.get_peer_versions()) is None:
        raise TransferError("the peer does not speak Dilated File-Transfer")
    dilated = await dilate(wormhole, listen=listen, on_status=on_status)
    try:
        report = await receive_files(dilated, out_dir, permission="ask", accept=accept, progress=progress,
                                     on_text=on_text, place=place, sha256=sha256)
        await dilated.flush()
        return report
    finally:
        await dilated.close()
