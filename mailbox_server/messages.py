"""Wire format of the mailbox protocol: inbound messages as frozen dataclasses, outbound builders.

Every frame is one JSON object. Inbound messages are decoded lazily by the state machine so that the
error checks run in exactly the reference server's order (e.g. `claim` checks its field before the
once-per-connection rule, `open` the other way round). Outbound messages are plain dicts; the adapter
adds `server_tx` just before it writes them, as the reference does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# The reference's error strings, byte for byte (clients display them; "crowded" is special-cased).
MISSING_TYPE = "missing 'type'"
MUST_BIND = "must bind first"
UNKNOWN_TYPE = "unknown type"
PING_REQUIRES = "ping requires 'ping'"
ALREADY_BOUND = "already bound"
BIND_APPID = "bind requires 'appid'"
BIND_SIDE = "bind requires 'side'"
GREEDY = "you already allocated one, don't be greedy"
CLAIM_REQUIRES = "claim requires 'nameplate'"
ONE_CLAIM = "only one claim per connection"
CROWDED = "crowded"
RECLAIMED = "reclaimed"
ONE_RELEASE = "only one release per connection"
RELEASE_SAME = "release and claim must use same nameplate"
RELEASE_FOLLOW = "release without nameplate must follow claim"
ONE_OPEN = "only one open per connection"
OPEN_REQUIRES = "open requires 'mailbox'"
MUST_OPEN = "must open mailbox before adding"
MISSING_PHASE = "missing 'phase'"
MISSING_BODY = "missing 'body'"
ONE_CLOSE = "only one close per connection"
CLOSE_SAME = "open and close must use same mailbox"
CLOSE_FOLLOW = "close without mailbox must follow open"

# Inputs on which the reference drops the TCP connection without a word. We send a clear error
# first and then close the WebSocket (code 1008), so the client learns why.
NOT_JSON = "message is not a JSON object"
BAD_NAMEPLATE = "invalid nameplate: must be 1-40 ASCII digits"
BAD_MAILBOX = "open requires 'mailbox' to be a string"
BAD_BIND = "bind requires 'appid' and 'side' to be strings"
BAD_ADD = "add requires 'phase' and 'body' to be strings"
BAD_MOOD = "close requires 'mood' to be a string"
BAD_TEXT = "strings must be valid Unicode (no lone surrogates)"
NO_NAMEPLATES = "unable to find a free nameplate-id"

# Limits (our additions; the reference has none).
TOO_LARGE = "message too large"
MAILBOX_FULL = "mailbox is full"
TOO_MANY_MAILBOXES = "too many mailboxes on this connection"
SERVER_FULL = "server is full, try again later"
TOO_FAST = "too many messages, slow down"
BIND_TIMEOUT = "no bind received in time"
TOO_MANY_CONNECTIONS = "too many connections from your address"
STORE_UNAVAILABLE = "mailbox storage unavailable, try again later"  # Redis unreachable: new channels wait

MAX_NAMEPLATE_LEN = 40
_NAMEPLATE = re.compile(r"[0-9]{1,40}")


class ProtocolError(Exception):
    """A client message was refused with `error` text; the connection stays usable."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class FatalProtocolError(ProtocolError):
    """Input the reference drops the connection for: error text, then the connection closes."""


def parse_frame(payload: bytes | str) -> dict[str, Any]:
    """Decode one frame into a dict, or raise FatalProtocolError."""
    try:
        if isinstance(payload, bytes | bytearray | memoryview):
            payload = bytes(payload).decode("utf-8")
        msg = json.loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FatalProtocolError(NOT_JSON) from exc
    if not isinstance(msg, dict):
        raise FatalProtocolError(NOT_JSON)
    return msg


def text_ok(*values: str) -> bool:
    """JSON may carry lone surrogates ("\\ud800") that SQLite cannot store: refuse them up front."""
    for v in values:
        if not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return False
    return True


def valid_nameplate(name: Any) -> bool:
    # ASCII digits only: the reference's `\d+$` also lets Unicode digits and a trailing "\n" through.
    return isinstance(name, str) and _NAMEPLATE.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class Bind:
    appid: str
    side: str
    client_impl: str | None
    client_version: str | None

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> Bind:
        if "appid" not in msg:
            raise ProtocolError(BIND_APPID)
        if "side" not in msg:
            raise ProtocolError(BIND_SIDE)
        appid, side = msg["appid"], msg["side"]
        if not isinstance(appid, str) or not isinstance(side, str):
            raise FatalProtocolError(BAD_BIND)
        if not text_ok(appid, side):
            raise FatalProtocolError(BAD_TEXT)
        impl = ver = None
        cv = msg.get("client_version")
        if isinstance(cv, list | tuple) and len(cv) == 2:
            impl = cv[0][:64] if isinstance(cv[0], str) else None
            ver = cv[1][:64] if isinstance(cv[1], str) else None
        return cls(appid, side, impl, ver)


@dataclass(frozen=True, slots=True)
class Claim:
    nameplate: str

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> Claim:
        if "nameplate" not in msg:
            raise ProtocolError(CLAIM_REQUIRES)
        return cls(msg["nameplate"])  # validated after the once-per-connection check


@dataclass(frozen=True, slots=True)
class Release:
    nameplate: str | None
    given: bool

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> Release:
        return cls(msg.get("nameplate"), "nameplate" in msg)


@dataclass(frozen=True, slots=True)
class Open:
    mailbox: str

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> Open:
        if "mailbox" not in msg:
            raise ProtocolError(OPEN_REQUIRES)
        if not isinstance(msg["mailbox"], str):
            raise FatalProtocolError(BAD_MAILBOX)
        if not text_ok(msg["mailbox"]):
            raise FatalProtocolError(BAD_TEXT)
        return cls(msg["mailbox"])


@dataclass(frozen=True, slots=True)
class Add:
    phase: str
    body: str
    msg_id: Any

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> Add:
        if "phase" not in msg:
            raise ProtocolError(MISSING_PHASE)
        if "body" not in msg:
            raise ProtocolError(MISSING_BODY)
        phase, body = msg["phase"], msg["body"]
        if not isinstance(phase, str) or not isinstance(body, str):
            raise FatalProtocolError(BAD_ADD)
        if not text_ok(phase, body):
            raise FatalProtocolError(BAD_TEXT)
        msg_id = msg.get("id")
        if not isinstance(msg_id, str | int | float | None) or isinstance(msg_id, bool):
            msg_id = None  # stored and echoed; keep it a scalar
        elif isinstance(msg_id, str) and not text_ok(msg_id):
            msg_id = None
        return cls(phase, body, msg_id)


@dataclass(frozen=True, slots=True)
class Close:
    mailbox: Any
    given: bool
    mood: str | None

    @classmethod
    def decode(cls, msg: dict[str, Any]) -> Close:
        mood = msg.get("mood")
        if mood is not None and not isinstance(mood, str):
            raise FatalProtocolError(BAD_MOOD)
        if mood is not None and not text_ok(mood):
            raise FatalProtocolError(BAD_TEXT)
        return cls(msg.get("mailbox"), "mailbox" in msg, mood[:32] if mood else mood)


# Outbound builders (server_tx is added by the adapter).
def ack(msg_id: Any) -> dict[str, Any]:
    return {"type": "ack", "id": msg_id}


def welcome(info: dict[str, Any]) -> dict[str, Any]:
    return {"type": "welcome", "welcome": info}


def error(text: str, orig: Any) -> dict[str, Any]:
    return {"type": "error", "error": text, "orig": orig}


def message(side: str, phase: str, body: str, server_rx: float, msg_id: Any) -> dict[str, Any]:
    return {"type": "message", "side": side, "phase": phase, "body": body,
            "server_rx": server_rx, "id": msg_id}


# One encoder for every frame: json.dumps with options builds a new encoder on each call.
to_json = json.JSONEncoder(separators=(", ", ": ")).encode


# The frames sent most (an ack per client message, a message per add and recipient) are spliced from
# templates when every field has its usual type: the same bytes as to_json, without walking the dict.
_str = json.encoder.encode_basestring_ascii  # what to_json writes for a str (ensure_ascii)
_float = float.__repr__  # what to_json writes for a finite float; time.time() is finite


def _id(v: Any) -> str | None:
    if type(v) is str:
        return _str(v)
    if v is None:
        return "null"
    return None


def encode(msg: dict[str, Any], server_tx: float) -> bytes:
    msg["server_tx"] = server_tx
    kind = msg.get("type")
    if kind == "ack" and len(msg) == 3:
        i = _id(msg["id"])
        if i is not None:
            return f'{{"type": "ack", "id": {i}, "server_tx": {_float(server_tx)}}}'.encode()
    elif kind == "message" and len(msg) == 7:
        side, phase, body, rx, i = msg["side"], msg["phase"], msg["body"], msg["server_rx"], _id(msg["id"])
        if type(side) is str and type(phase) is str and type(body) is str and type(rx) is float and i is not None:
            return (f'{{"type": "message", "side": {_str(side)}, "phase": {_str(phase)}, "body": {_str(body)}, '
                    f'"server_rx": {_float(rx)}, "id": {i}, "server_tx": {_float(server_tx)}}}').encode()
    return to_json(msg).encode()
