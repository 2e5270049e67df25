"""A small file inside the message that offers it, between burrow peers: no transit connection, no Dilation.

A burrow sender whose one FILE is at most INLINE_MAX bytes (apps/transfer_versions.py) says its size in its
versions (`burrow.inline-file`), and a burrow receiver says the most it takes. When both have said it, the
sender puts the file in one mailbox message, {"burrow-file": {"filename", "filesize", "data": base64}}. The
receiver checks and asks as for any file (free space, overwriting, the user's yes: receive.accept_offer),
writes it beside the target, links it into place, and answers {"answer": {"file_ack": "ok"}} (or
{"error": ...} for a refusal). Every mailbox message is encrypted and authenticated with the wormhole's key,
as a text is. magic-wormhole and wormhole-william say nothing of the kind and get the usual transfer.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path

from burrow.client.apps.receive import Received, ReceiveOptions, accept_offer, place, temporary_beside
from burrow.client.apps.transfer import Offer, _recv, _send
from burrow.client.apps.transfer_versions import INLINE_MAX
from burrow.client.errors import TransferError
from burrow.client.wormhole import Wormhole

DESCRIPTION = "inside the wormhole's encrypted messages"


def read_small(path: Path) -> bytes | None:
    """The file's bytes if it is a regular file of at most INLINE_MAX bytes, else None."""
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        data = f.read(INLINE_MAX + 1)
    return data if len(data) <= INLINE_MAX else None


async def send_inline(w: Wormhole, name: str, data: bytes) -> str:
    """Send the file; returns once the receiver has written it (raises TransferError if it refused)."""
    _send(w, {"burrow-file": {"filename": name, "filesize": len(data),
                              "data": base64.b64encode(data).decode("ascii")}})
    while True:
        msg = await _recv(w)
        if "answer" in msg:
            if msg["answer"].get("file_ack") != "ok":
                raise TransferError(f"transfer not accepted: {msg['answer']!r}")
            return DESCRIPTION


def _decode(message: dict) -> tuple[Offer, bytes]:
    try:
        f = message["burrow-file"]
        name, size, data = str(f["filename"]), int(f["filesize"]), base64.b64decode(f["data"], validate=True)
    except (KeyError, TypeError, ValueError, binascii.Error) as e:
        raise TransferError(f"malformed file message: {e}") from e
    if size != len(data) or size > INLINE_MAX:
        raise TransferError(f"file message of {len(data)} bytes says {size}; at most {INLINE_MAX} are taken")
    return Offer("file", name, size), data


async def receive_inline(w: Wormhole, opts: ReceiveOptions) -> Received:
    while True:
        msg = await _recv(w)
        if "burrow-file" in msg:
            break
    try:
        offer, data = _decode(msg)
    except TransferError as e:
        _send(w, {"error": str(e)})
        raise
    dest, exists = await accept_offer(w, offer, opts)
    fd, tmp = temporary_beside(dest)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        place(tmp, dest, exists)
    except OSError as e:
        _send(w, {"error": f"the receiver could not write the file ({e.strerror or e})"})
        raise
    finally:
        tmp.unlink(missing_ok=True)
    _send(w, {"answer": {"file_ack": "ok"}})
    return Received(offer, dest, hashlib.sha256(data).hexdigest() if opts.sha256 else "")
