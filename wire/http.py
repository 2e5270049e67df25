"""The little HTTP/1.1 the relay and the clients need, sans-IO: one request head in, one response out.

in:  bytes until the blank line (bounded by `max_head`); whatever follows stays with the caller,
     because a fast-start DERP client sends ClientInfo right behind its request.
out: Request(method, target, headers) or HttpError; response bytes from `response()`.
Client side: `websocket_request()` builds an upgrade request, `parse_response_head()` reads the answer.
No bodies are read: every endpoint here is GET/HEAD, or an upgrade.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field

from .errors import WireError

MAX_HEAD = 16 * 1024
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

REASONS = {101: "Switching Protocols", 200: "OK", 204: "No Content", 400: "Bad Request",
           403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 426: "Upgrade Required",
           431: "Request Header Fields Too Large", 503: "Service Unavailable"}


class HttpError(WireError):
    reason = "http"

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names; repeats joined by ", "

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name, default)

    def tokens(self, name: str) -> list[str]:
        return _tokens(self.headers, name)


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names; repeats joined by ", "

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name, default)

    def tokens(self, name: str) -> list[str]:
        return _tokens(self.headers, name)


def _tokens(headers: dict[str, str], name: str) -> list[str]:
    return [t.strip().lower() for t in headers.get(name, "").split(",") if t.strip()]


class RequestReader:
    """Accumulates bytes until a full request head; `feed` returns (Request, rest) or None."""

    __slots__ = ("_buf", "max_head")

    def __init__(self, max_head: int = MAX_HEAD) -> None:
        self._buf = b""
        self.max_head = max_head

    def feed(self, data: bytes) -> tuple[Request, bytes] | None:
        self._buf += data
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > self.max_head:
                raise HttpError(431, "request head too large")
            return None
        if end > self.max_head:
            raise HttpError(431, "request head too large")
        head, rest = self._buf[:end], self._buf[end + 4:]
        self._buf = b""
        return parse_head(head), rest


def parse_head(head: bytes) -> Request:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes everything
        raise HttpError(400, "undecodable head") from exc
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise HttpError(400, "malformed request line")
    return Request(parts[0], parts[1], _headers(lines[1:]))


def parse_response_head(head: bytes) -> Response:
    """A response's status line and headers (without the blank line) -> Response, or HttpError."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise HttpError(502, f"malformed status line {lines[0][:80]!r}")
    return Response(int(code), reason, _headers(lines[1:]))


def _headers(lines: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, "malformed header line")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def websocket_request(host: str, target: str, key: str, headers: dict[str, str] | None = None) -> bytes:
    """A client's WebSocket upgrade request; `host` is the Host header's value (host[:port])."""
    lines = [f"GET {target} HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def response(status: int, headers: dict[str, str] | None = None, body: bytes = b"",
             head_only: bool = False) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}"]
    hdrs = dict(headers or {})
    if status not in (101, 204):
        hdrs.setdefault("Content-Length", str(len(body)))
    if status != 101:
        hdrs.setdefault("Connection", "close")
    lines += [f"{k}: {v}" for k, v in hdrs.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head_only else body)


def websocket_accept(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode("latin-1") + WS_GUID).digest()).decode()
