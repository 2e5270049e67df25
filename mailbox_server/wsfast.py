"""Pure parsers for a mailbox connection's fast paths, each a strict subset of what `websockets` accepts.

`quick_upgrade` recognises the usual complete `GET /v1` upgrade request and `frame_at` finds one client
frame in received bytes. Anything else is left to `websockets`, so its answers (status codes, close codes,
limits) stay exactly its own; these only skip its generators and objects on the common path.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import time

from websockets.utils import accept_key

FIN_TEXT = 0x81  # first header byte of a complete text frame without reserved bits
MORE = -1  # frame_at: the frame is not complete yet
FOREIGN = -2  # frame_at: a header websockets refuses at once (it fails the connection on these bytes)
_OPCODES = frozenset((0, 1, 2, 8, 9, 10))  # continuation, text, binary, close, ping, pong


def frame_at(buf: bytes, pos: int, max_size: int | None) -> tuple[int, int]:
    """(payload start, frame end) of the client frame at `pos`, (MORE, 0) or (FOREIGN, 0).

    FOREIGN is what `websockets` refuses from the header alone: unmasked, reserved bits, unknown opcode,
    a control frame fragmented or over 125 bytes, a payload over `max_size`. The caller hands those bytes
    over at once, so the close code and its timing stay those of `websockets`."""
    n = len(buf)
    if n - pos < 2:
        return MORE, 0
    b0, b1 = buf[pos], buf[pos + 1]
    length = b1 & 0x7F
    if (not b1 & 0x80 or b0 & 0x70 or (b0 & 0x0F) not in _OPCODES
            or (b0 & 0x08 and (length > 125 or not b0 & 0x80))):
        return FOREIGN, 0
    start = pos + 6
    if length == 126:
        if n - pos < 4:
            return MORE, 0
        length = int.from_bytes(buf[pos + 2:pos + 4], "big")
        start = pos + 8
    elif length == 127:
        if n - pos < 10:
            return MORE, 0
        length = int.from_bytes(buf[pos + 2:pos + 10], "big")
        start = pos + 14
    if max_size is not None and length > max_size:
        return FOREIGN, 0
    end = start + length
    return (start, end) if end <= n else (MORE, 0)


# Request headers the fast upgrade takes, each at most once; any other header (a subprotocol, a body,
# repeats, odd spacing) sends the request to websockets. Extensions are ignored there too (none offered).
_KNOWN = frozenset(("host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
                    "sec-websocket-extensions", "origin", "user-agent", "pragma", "cache-control",
                    "accept-encoding", "x-real-ip", "x-real-port"))
_date = (0, "")


class LowerHeaders(dict[str, str]):
    """Request headers under lower-case names, read by any case (as websockets' Headers are)."""

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return dict.__getitem__(self, name.lower())


def quick_upgrade(data: bytes) -> LowerHeaders | None:
    """The headers (lower-case names) of `data` if it is exactly one complete `GET /v1` WebSocket upgrade
    that websockets would accept as it stands, else None."""
    if not data.endswith(b"\r\n\r\n") or len(data) > 4096 or not data.startswith(b"GET /v1 HTTP/1.1\r\n"):
        return None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return None
    lines = text[18:-4].split("\r\n")
    headers = LowerHeaders()
    for line in lines:
        name, colon, value = line.partition(":")
        name = name.lower()
        if not colon or name not in _KNOWN or dict.__contains__(headers, name) or not line.isprintable():
            return None
        dict.__setitem__(headers, name, value.strip(" "))
    if headers.get("upgrade", "").lower() != "websocket" or headers.get("sec-websocket-version") != "13":
        return None
    tokens = [t.strip(" ").lower() for t in headers.get("connection", "").split(",")]
    if "upgrade" not in tokens or not all(t.replace("-", "").isalnum() for t in tokens):
        return None
    key = headers.get("sec-websocket-key", "")
    try:
        if len(base64.b64decode(key.encode(), validate=True)) != 16:
            return None
    except binascii.Error:
        return None
    return headers


def switching(key: str, server: str) -> bytes:
    """The 101 response websockets would send for this Sec-WebSocket-Key, byte for byte."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, email.utils.formatdate(now, usegmt=True))
    return (f"HTTP/1.1 101 Switching Protocols\r\nDate: {_date[1]}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept_key(key)}\r\nServer: {server}\r\n\r\n").encode()
