"""The server's persistent Curve25519 private key.

File format as derper's config: JSON `{"PrivateKey": "privkey:<64 hex>"}`; created with mode 0600
when missing. A bare 64-hex line is accepted too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from burrow.wire.derp.handshake import generate_private_key


class KeyFileError(ValueError):
    pass


def _parse(text: str) -> bytes:
    text = text.strip()
    if text.startswith("{"):
        try:
            text = str(json.loads(text).get("PrivateKey", ""))
        except (ValueError, AttributeError) as exc:
            raise KeyFileError("key file is not valid JSON") from exc
    text = text.removeprefix("privkey:")
    try:
        key = bytes.fromhex(text)
    except ValueError as exc:
        raise KeyFileError("private key is not hex") from exc
    if len(key) != 32:
        raise KeyFileError("private key must be 32 bytes")
    return key


def load_or_create(path: str | None) -> bytes:
    if path is None:
        return generate_private_key()
    p = Path(path)
    if p.exists():
        return _parse(p.read_text())
    p.parent.mkdir(parents=True, exist_ok=True)
    key = generate_private_key()
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps({"PrivateKey": "privkey:" + key.hex()}) + "\n")
    return key
