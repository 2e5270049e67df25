"""The link handshake: four JSON frames that prove both ends own their public keys.

in:  bytes from the TCP stream; out: bytes to write, then `complete` (and `rest`, the bytes that
     followed the last handshake frame) or a HandshakeError.
states (initiator): sent-1 -> sent-3 -> complete.   (responder): want-1 -> sent-2 -> complete.

Each frame is one compact JSON object and a newline, in the field order of Skywire's handshakeFrame
(version, initiator, responder, nonce, sig1, sig2, accepted), which is what Go's json.Encoder writes.
sig1 (by the responder) signs SHA-256 of  version || initiator || responder || nonce  with hex fields
decoded; sig2 (by the initiator) signs the same bytes followed by sig1. Each side checks the other's
signature over the values it sent or received itself, and that echoed fields were not changed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace

from . import keys
from .errors import HandshakeError, KeyFormatError

VERSION = "0.1"
NONCE_LEN = 16
MAX_LINE = 2048  # a full frame 4 is about 520 bytes


@dataclass(frozen=True)
class HandshakeFrame:
    version: str
    initiator: bytes
    responder: bytes
    nonce: bytes
    sig1: bytes | None = None
    sig2: bytes | None = None
    accepted: bool | None = None

    def encode(self) -> bytes:
        obj: dict = {"version": self.version, "initiator": self.initiator.hex(),
                     "responder": self.responder.hex(), "nonce": self.nonce.hex()}
        if self.sig1 is not None:
            obj["sig1"] = self.sig1.hex()
        if self.sig2 is not None:
            obj["sig2"] = self.sig2.hex()
        if self.accepted is not None:
            obj["accepted"] = self.accepted
        return json.dumps(obj, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def decode(cls, line: bytes, want_sig1: bool = False, want_sig2: bool = False) -> HandshakeFrame:
        """Parse one frame; fields this step does not need are ignored (Go writes zero signatures)."""
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HandshakeError("handshake frame is not JSON", "bad_json") from exc
        if not isinstance(obj, dict):
            raise HandshakeError("handshake frame is not a JSON object", "bad_json")
        try:
            version = _text(obj, "version")
            initiator = keys.parse_public_key(_text(obj, "initiator"))
            responder = keys.parse_public_key(_text(obj, "responder"))
            nonce = bytes.fromhex(_text(obj, "nonce"))
            sig1 = keys.parse_signature(_text(obj, "sig1")) if want_sig1 else None
            sig2 = keys.parse_signature(_text(obj, "sig2")) if want_sig2 else None
        except (KeyFormatError, ValueError) as exc:
            raise HandshakeError(f"bad handshake field: {exc}", "bad_field") from exc
        if len(nonce) != NONCE_LEN:
            raise HandshakeError("nonce must be 16 bytes (32 hex digits)", "bad_field")
        accepted = obj.get("accepted")
        if accepted is not None and not isinstance(accepted, bool):
            raise HandshakeError("'accepted' must be true or false", "bad_field")
        return cls(version, initiator, responder, nonce, sig1, sig2, accepted)

    def signed_bytes(self, with_sig1: bool) -> bytes:
        out = self.version.encode() + self.initiator + self.responder + self.nonce
        return out + self.sig1 if with_sig1 and self.sig1 is not None else out

    def same_opening(self, other: HandshakeFrame) -> bool:
        return (self.version, self.initiator, self.responder, self.nonce) == (
            other.version, other.initiator, other.responder, other.nonce)


def _text(obj: dict, name: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise ValueError(f"'{name}' is missing or not a string")
    return value


class _Lines:
    """Splits the stream into newline-terminated lines, none longer than MAX_LINE."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> bytes | None:
        self.buf += data
        end = self.buf.find(b"\n")
        if end < 0:
            if len(self.buf) > MAX_LINE:
                raise HandshakeError("handshake frame too long", "too_long")
            return None
        if end > MAX_LINE:
            raise HandshakeError("handshake frame too long", "too_long")
        line = bytes(self.buf[:end])
        del self.buf[:end + 1]
        return line

    def rest(self) -> bytes:
        rest, self.buf = bytes(self.buf), bytearray()
        return rest


class _Steps:
    """Feeds whole lines to `_step` until the handshake is complete."""

    complete = False
    rest = b""
    _lines: _Lines

    def receive_data(self, data: bytes) -> bytes:
        """Bytes to send back; raises HandshakeError (with `reply` to send first, if any)."""
        out = bytearray()
        while not self.complete and (line := self._lines.feed(data)) is not None:
            data = b""
            out += self._step(line)
        if self.complete:
            self.rest = self._lines.rest()
        return bytes(out)

    def _step(self, line: bytes) -> bytes:
        raise NotImplementedError


class InitiatorHandshake(_Steps):
    """The dialling side: knows the responder's key, sends frames 1 and 3."""

    def __init__(self, local: keys.SecretKey, responder: bytes, nonce: bytes | None = None) -> None:
        self.local = local
        self.remote = responder
        self.frame1 = HandshakeFrame(VERSION, local.public, responder, nonce or os.urandom(NONCE_LEN))
        self.state = "sent-1"
        self.complete = False
        self.rest = b""
        self._lines = _Lines()

    def start(self) -> bytes:
        return self.frame1.encode()

    def _step(self, line: bytes) -> bytes:
        if self.state == "sent-1":
            f2 = HandshakeFrame.decode(line, want_sig1=True)
            if not f2.same_opening(self.frame1):
                raise HandshakeError("responder changed the opening fields", "echo_mismatch")
            if not keys.verify(self.remote, f2.sig1, self.frame1.signed_bytes(False)):
                raise HandshakeError("sig1 is not the responder's signature", "bad_sig1")
            with_sig1 = replace(self.frame1, sig1=f2.sig1)
            self.frame3 = replace(with_sig1, sig2=self.local.sign(with_sig1.signed_bytes(True)))
            self.state = "sent-3"
            return self.frame3.encode()
        f4 = HandshakeFrame.decode(line)
        if f4.accepted is not True:
            raise HandshakeError("the responder refused the link", "refused")
        self.state = "complete"
        self.complete = True
        return b""


class ResponderHandshake(_Steps):
    """The listening side: answers frame 1 with sig1, checks sig2, sends frame 4.

    `admit(initiator_key)` is asked once sig2 checks out; False sends `accepted: false` (no room).
    """

    def __init__(self, local: keys.SecretKey, admit: Callable[[bytes], bool] = lambda _key: True) -> None:
        self.local = local
        self.admit = admit
        self.remote = b""
        self.state = "want-1"
        self.complete = False
        self.rest = b""
        self._lines = _Lines()

    def _step(self, line: bytes) -> bytes:
        if self.state == "want-1":
            f1 = HandshakeFrame.decode(line)
            if f1.version != VERSION:
                raise HandshakeError(f"unsupported version {f1.version[:16]!r}", "version")
            if f1.responder != self.local.public:
                raise HandshakeError("frame 1 is addressed to another key", "wrong_responder")
            self.remote = f1.initiator
            opening = HandshakeFrame(VERSION, f1.initiator, f1.responder, f1.nonce)
            self.frame2 = replace(opening, sig1=self.local.sign(opening.signed_bytes(False)))
            self.state = "sent-2"
            return self.frame2.encode()
        f3 = HandshakeFrame.decode(line, want_sig1=True, want_sig2=True)
        frame3 = replace(self.frame2, sig2=f3.sig2)
        refusal = replace(frame3, accepted=False).encode()  # sent before the link closes
        if not f3.same_opening(self.frame2) or f3.sig1 != self.frame2.sig1:
            raise HandshakeError("initiator changed the signed fields", "echo_mismatch", refusal)
        if not keys.verify(self.remote, f3.sig2, self.frame2.signed_bytes(True)):
            raise HandshakeError("sig2 is not the initiator's signature", "bad_sig2", refusal)
        if not self.admit(self.remote):
            raise HandshakeError("no room for another link", "full", refusal)
        self.state = "complete"
        self.complete = True
        return replace(frame3, accepted=True).encode()
