"""Classic Transit, sans-IO, as magic-wormhole 0.24 and wormhole-william speak it (handshakes, hints, records).

in:  the transit key, our role ("sender"/"receiver"), bytes read from one candidate connection.
out: bytes to write, and events: RelayReady, PeerReady (handshake verified), Go (receiver got "go"),
     HandshakeFailed; then encrypted records (RecordEncoder / RecordDecoder).
states (per connection): [relay: wait "ok\\n"] -> wait peer handshake -> (receiver: wait "go\\n") -> records.

Wire: relay line  b"please relay " + hex(HKDF(tk,32,"transit_relay_token")) + b" for side " + 16 hex + b"\\n";
handshakes b"transit sender|receiver " + hex(HKDF(tk,32,"transit_sender|receiver")) + b" ready\\n\\n";
records len(4, BE) || nonce(24, BE counter from 0 per direction) || secretbox(plaintext).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..errors import TransitError
from ..keys import hkdf
from ..nat import SIMOPEN_ABILITY
from ..sodium import secretbox

TRANSIT_KEY_LENGTH = 32
FRAME_HEADER = 4 + 24 + 16  # length, nonce and MAC in front of each record's ciphertext
MAX_RECORD = 64 * 1024 * 1024  # bytes; a peer announcing more is broken or hostile
MAX_HANDSHAKE = 1024  # bytes we read before a handshake must be complete
ABILITIES = [{"type": "direct-tcp-v1"}, {"type": "relay-v1"}, SIMOPEN_ABILITY]


def offers_simultaneous_open(transit_message: dict) -> bool:
    """Whether the peer's `transit` message lists tcp-simultaneous-open-v1 in abilities-v1."""
    abilities = transit_message.get("abilities-v1") if isinstance(transit_message, dict) else None
    return isinstance(abilities, list) and SIMOPEN_ABILITY in abilities


class TransitProtocolError(TransitError):
    """The peer or relay broke the transit protocol on one connection."""


# ---- keys ------------------------------------------------------------------------------------

def relay_token(key: bytes) -> str:
    return hkdf(key, 32, b"transit_relay_token").hex()


def relay_handshake(key: bytes, side: str) -> bytes:
    return b"please relay " + relay_token(key).encode("ascii") + b" for side " + side.encode("ascii") + b"\n"


def sender_handshake(key: bytes) -> bytes:
    return b"transit sender " + hkdf(key, 32, b"transit_sender").hex().encode("ascii") + b" ready\n\n"


def receiver_handshake(key: bytes) -> bytes:
    return b"transit receiver " + hkdf(key, 32, b"transit_receiver").hex().encode("ascii") + b" ready\n\n"


def record_keys(key: bytes, role: str) -> tuple[bytes, bytes]:
    """(key we encrypt with, key we decrypt with) for `role`."""
    s = hkdf(key, 32, b"transit_record_sender_key")
    r = hkdf(key, 32, b"transit_record_receiver_key")
    return (s, r) if role == "sender" else (r, s)


def new_relay_side() -> str:
    return os.urandom(8).hex()


# ---- hints -----------------------------------------------------------------------------------

@dataclass(frozen=True, order=True)
class TcpHint:
    hostname: str
    port: int
    priority: float = field(default=0.0, compare=False)

    def encode(self) -> dict:
        return {"type": "direct-tcp-v1", "priority": self.priority, "hostname": self.hostname, "port": self.port}

    @classmethod
    def decode(cls, d: dict) -> TcpHint | None:
        try:
            host, port = d["hostname"], int(d["port"])
            prio = float(d.get("priority", 0.0))
        except (KeyError, TypeError, ValueError):
            return None
        if not isinstance(host, str) or not host or not 0 < port < 65536:
            return None
        return cls(host, port, prio)


def parse_helper(text: str) -> TcpHint:
    """`tcp:HOST:PORT[:priority=F]` (the --transit-helper syntax); IPv6 hosts in [brackets]."""
    if not text.startswith("tcp:"):
        raise ValueError(f"transit helper must look like tcp:HOST:PORT, not {text!r}")
    rest = text[4:]
    prio = 0.0
    if ":priority=" in rest:
        rest, _, p = rest.rpartition(":priority=")
        prio = float(p)
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise ValueError(f"transit helper must look like tcp:HOST:PORT, not {text!r}")
    return TcpHint(host, int(port), prio)


def encode_hints(direct: list[TcpHint], relays: list[TcpHint]) -> list[dict]:
    hints = [h.encode() for h in direct]
    for r in relays:
        hints.append({"type": "relay-v1", "hints": [r.encode()]})
    return hints


def decode_hints(hints: list) -> tuple[list[TcpHint], list[TcpHint]]:
    """(direct hints, relay hints) we can use; unknown types (tor, websocket) are skipped."""
    direct: list[TcpHint] = []
    relays: list[TcpHint] = []
    for h in hints if isinstance(hints, list) else []:
        if not isinstance(h, dict):
            continue
        if h.get("type") == "direct-tcp-v1":
            t = TcpHint.decode(h)
            if t:
                direct.append(t)
        elif h.get("type") == "relay-v1":
            for sub in h.get("hints") or []:
                if isinstance(sub, dict) and sub.get("type") == "direct-tcp-v1":
                    t = TcpHint.decode(sub)
                    if t:
                        relays.append(t)
        elif h.get("type") == "tcp":  # pre-0.10 relay hint spelling still seen in old clients
            t = TcpHint.decode(h)
            if t:
                relays.append(t)
    return direct, relays


# ---- per-connection handshake ----------------------------------------------------------------

@dataclass(frozen=True)
class RelayReady:
    pass


@dataclass(frozen=True)
class PeerReady:
    pass


@dataclass(frozen=True)
class Go:
    pass


class Handshake:
    """The handshake on one candidate connection. Call start() once the key is known."""

    def __init__(self, key: bytes, role: str, relay_side: str | None = None):
        if role not in ("sender", "receiver"):
            raise ValueError(role)
        self.role = role
        self._mine = sender_handshake(key) if role == "sender" else receiver_handshake(key)
        self._theirs = receiver_handshake(key) if role == "sender" else sender_handshake(key)
        self._relay = relay_handshake(key, relay_side) if relay_side else None
        self.state = "relay" if self._relay else "peer"
        self._buf = bytearray()

    def start(self) -> bytes:
        return self._relay if self._relay else self._mine

    def feed(self, data: bytes) -> tuple[list, bytes]:
        """Consume handshake bytes; return (events, bytes to write). Leftover goes to `leftover()`."""
        self._buf += data
        events: list = []
        out = b""
        while True:
            want = {"relay": b"ok\n", "peer": self._theirs, "go": b"go\n"}.get(self.state)
            if want is None:
                break
            n = min(len(self._buf), len(want))
            if bytes(self._buf[:n]) != want[:n]:
                raise TransitProtocolError(f"unexpected handshake bytes in state {self.state}")
            if len(self._buf) < len(want):
                break
            del self._buf[: len(want)]
            if self.state == "relay":
                self.state = "peer"
                events.append(RelayReady())
                out += self._mine
            elif self.state == "peer":
                self.state = "wait-go" if self.role == "sender" else "go"
                events.append(PeerReady())
            else:
                self.state = "records"
                events.append(Go())
        return events, out

    def wanted(self) -> int:
        """How many bytes complete the current step (so a reader never consumes record data)."""
        want = {"relay": b"ok\n", "peer": self._theirs, "go": b"go\n"}.get(self.state, b"")
        return max(len(want) - len(self._buf), 0)

    def select(self) -> bytes:
        """Sender only: this connection won; write the result and switch to records."""
        assert self.role == "sender" and self.state == "wait-go"
        self.state = "records"
        return b"go\n"

    def leftover(self) -> bytes:
        out = bytes(self._buf)
        self._buf.clear()
        return out


# ---- records ---------------------------------------------------------------------------------

class _Box:
    """XSalsa20-Poly1305 secretbox straight into and out of frames (client/sodium.py picks the build).

    PyNaCl's SecretBox allocates a zeroed buffer, then copies the result twice (and we would copy
    again to frame it); this writes the ciphertext straight into the frame and reads the plaintext
    straight out of a view of the received body.
    """

    def __init__(self, key: bytes):
        if len(key) != 32:
            raise ValueError("secretbox keys are 32 bytes")
        self._key = bytes(key)
        self._lib = secretbox()

    def seal_frame(self, plaintext, nonce: bytes) -> bytearray:
        n = len(plaintext)
        frame = bytearray(4 + 24 + 16 + n)
        frame[0:4] = (24 + 16 + n).to_bytes(4, "big")
        frame[4:28] = nonce
        try:
            self._lib.seal_into(memoryview(frame)[28:], plaintext, nonce, self._key)
        except ValueError as e:
            raise TransitProtocolError("encryption failed") from e
        return frame

    def seal_in_place(self, frame: memoryview, nonce: bytes) -> None:
        """frame = length, nonce, MAC, plaintext: fill in the first three, encrypt the plaintext where it is."""
        frame[0:4] = (len(frame) - 4).to_bytes(4, "big")
        frame[4:28] = nonce
        # libsodium seals with the MAC in front: out at +28 and in at +44 is exactly in place, no memmove
        try:
            self._lib.seal_into(frame[28:], frame[FRAME_HEADER:], nonce, self._key)
        except ValueError as e:
            raise TransitProtocolError("encryption failed") from e

    def open_in_place(self, body: memoryview, nonce: bytes) -> memoryview:
        """body = nonce, MAC, ciphertext: decrypt where it lies and return the plaintext's view."""
        if not self._lib.open_into(body[40:], body[24:], nonce, self._key):
            raise TransitProtocolError("record failed to authenticate")
        return body[40:]

    def open(self, body, nonce: bytes) -> bytearray:
        out = bytearray(len(body) - 24 - 16)
        if not self._lib.open_into(out, memoryview(body)[24:], nonce, self._key):
            raise TransitProtocolError("record failed to authenticate")
        return out


class RecordEncoder:
    def __init__(self, key: bytes):
        self._box = _Box(key)
        self._nonce = 0

    def encode(self, plaintext: bytes | bytearray | memoryview) -> bytearray:
        nonce = self._nonce.to_bytes(24, "big")
        self._nonce += 1
        return self._box.seal_frame(plaintext, nonce)

    def seal_in_place(self, frame: memoryview) -> None:
        """Seal the plaintext at frame[FRAME_HEADER:] as the next record, filling in its header."""
        nonce = self._nonce.to_bytes(24, "big")
        self._nonce += 1
        self._box.seal_in_place(frame, nonce)


class RecordDecoder:
    """Feed bytes, get plaintext records; or call decrypt() on one framed body (fast path)."""

    def __init__(self, key: bytes, max_record: int = MAX_RECORD):
        self._box = _Box(key)
        self._nonce = 0
        self._buf = bytearray()
        self.max_record = max_record

    def check_length(self, length: int) -> None:
        if length < 24 + 16 or length > self.max_record:
            raise TransitProtocolError(f"bad record length {length}")

    def decrypt(self, body: bytes | bytearray) -> bytearray:
        expected = self._nonce.to_bytes(24, "big")
        if bytes(memoryview(body)[:24]) != expected:
            raise TransitProtocolError("bad record nonce (reordered, replayed or wrong key)")
        plaintext = self._box.open(body, expected)
        self._nonce += 1
        return plaintext

    def open_in_place(self, body: memoryview) -> memoryview:
        """Open one framed body (nonce || MAC || ciphertext) where it lies; returns the plaintext's view."""
        expected = self._nonce.to_bytes(24, "big")
        if body[:24] != expected:
            raise TransitProtocolError("bad record nonce (reordered, replayed or wrong key)")
        plaintext = self._box.open_in_place(body, expected)
        self._nonce += 1
        return plaintext

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out = []
        while len(self._buf) >= 4:
            length = int.from_bytes(self._buf[:4], "big")
            self.check_length(length)
            if len(self._buf) < 4 + length:
                break
            body = bytes(self._buf[4: 4 + length])
            del self._buf[: 4 + length]
            out.append(bytes(self.decrypt(body)))
        return out


def ack_record(sha256_hex: str) -> bytes:
    """The receiver's closing record; without a digest ("": the sender said it needs none) just the "ok"."""
    return json.dumps({"ack": "ok", "sha256": sha256_hex} if sha256_hex else {"ack": "ok"}).encode("utf-8")
