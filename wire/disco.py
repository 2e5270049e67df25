"""Disco, Tailscale's path-discovery messages, sans-IO.

in:  one UDP datagram or DERP packet payload (bytes), and the box shared with its sender.
out: a Ping, Pong or CallMeMaybe, or a `DiscoError` (the caller drops the packet and counts it).

A packet is `magic "TS💬" (54 53 f0 9f 92 ac) | sender disco public key (32) | nonce (24) | box`,
where box is NaCl crypto_box (X25519, XSalsa20-Poly1305) sealed with the key shared between the
sender's and the receiver's disco keys. The plaintext is `type:u8 | version:u8 (0) | payload`:

  Ping        0x01  TxID (12) | sender node key (32, optional) | zero padding (path MTU probes)
  Pong        0x02  TxID (12) | source address the pinger was seen from: IP (16, v4-mapped) | port (2, BE)
  CallMeMaybe 0x03  N x (IP (16, v4-mapped) | port (2, BE)): the sender's endpoints; sent via DERP only

Receivers ignore trailing bytes, as Tailscale's disco/disco.go does; layouts follow that file.
Disco keys are their own Curve25519 key pairs, distinct from the DERP (node) key a peer is addressed by.
"""

from __future__ import annotations

import ipaddress
import os
import struct
from dataclasses import dataclass

import nacl.exceptions
import nacl.public

from .errors import WireError

MAGIC = "TS💬".encode()  # 54 53 f0 9f 92 ac
KEY_LEN = 32
NONCE_LEN = 24
HEADER_LEN = len(MAGIC) + KEY_LEN + NONCE_LEN  # 62: what a relay checks to call a packet disco
BOX_OVERHEAD = 16  # Poly1305 tag
TXID_LEN = 12
ENDPOINT_LEN = 18
VERSION = 0

PING = 0x01
PONG = 0x02
CALL_ME_MAYBE = 0x03

_PORT = struct.Struct(">H")
_ZERO_KEY = bytes(KEY_LEN)

Endpoint = tuple[str, int]  # (IP text, port), as asyncio's datagram addresses; IPv4 never v4-mapped


class DiscoError(WireError):
    """A packet that is not a usable disco message."""

    reason = "disco"


class NotDisco(DiscoError):
    """Shorter than the 62-byte header, or without the magic."""

    reason = "not_disco"


class CannotOpen(DiscoError):
    """The box does not open with the key shared with the claimed sender (forged, corrupt, wrong key)."""

    reason = "bad_box"


class MalformedMessage(DiscoError):
    """The plaintext is too short for its type."""

    reason = "malformed"


class UnknownType(DiscoError):
    """A message type this codec does not know (Tailscale's peer-relay types 0x04..0x09 among them)."""

    reason = "unknown_type"


def _encode_endpoint(ep: Endpoint) -> bytes:
    ip = ipaddress.ip_address(ep[0])
    raw = (ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed).packed
           if ip.version == 4 else ip.packed)
    return raw + _PORT.pack(ep[1])


def _decode_endpoint(raw: bytes | memoryview) -> Endpoint:
    ip6 = ipaddress.IPv6Address(bytes(raw[:16]))
    ip = ip6.ipv4_mapped or ip6
    return str(ip), _PORT.unpack_from(raw, 16)[0]


def _check_txid(tx_id: bytes) -> None:
    if len(tx_id) != TXID_LEN:
        raise ValueError(f"a TxID is {TXID_LEN} bytes, got {len(tx_id)}")


@dataclass(frozen=True)
class Ping:
    tx_id: bytes
    node_key: bytes | None = None
    padding: int = 0

    def encode(self) -> bytes:
        _check_txid(self.tx_id)
        key = b""
        if self.node_key is not None and self.node_key != _ZERO_KEY:
            if len(self.node_key) != KEY_LEN:
                raise ValueError("a node key is 32 bytes")
            key = self.node_key
        return bytes((PING, VERSION)) + self.tx_id + key + bytes(self.padding)

    @classmethod
    def decode(cls, body: bytes) -> Ping:
        if len(body) < TXID_LEN:
            raise MalformedMessage("Ping shorter than its TxID")
        rest = body[TXID_LEN:]
        key = None
        if len(rest) >= KEY_LEN:  # as Tailscale: 32 more bytes are the node key, an all-zero one is none
            key, rest = rest[:KEY_LEN], rest[KEY_LEN:]
            key = None if key == _ZERO_KEY else bytes(key)
        return cls(bytes(body[:TXID_LEN]), key, len(rest))


@dataclass(frozen=True)
class Pong:
    tx_id: bytes
    src: Endpoint

    def encode(self) -> bytes:
        _check_txid(self.tx_id)
        return bytes((PONG, VERSION)) + self.tx_id + _encode_endpoint(self.src)

    @classmethod
    def decode(cls, body: bytes) -> Pong:
        if len(body) < TXID_LEN + ENDPOINT_LEN:
            raise MalformedMessage("Pong shorter than TxID and address")
        return cls(bytes(body[:TXID_LEN]), _decode_endpoint(body[TXID_LEN:]))


@dataclass(frozen=True)
class CallMeMaybe:
    endpoints: tuple[Endpoint, ...] = ()

    def encode(self) -> bytes:
        return bytes((CALL_ME_MAYBE, VERSION)) + b"".join(_encode_endpoint(ep) for ep in self.endpoints)

    @classmethod
    def decode(cls, body: bytes, version: int = VERSION) -> CallMeMaybe:
        # Tailscale reads a body that is not whole endpoints (or a future version) as "no endpoints".
        if version != VERSION or len(body) % ENDPOINT_LEN:
            return cls(())
        view = memoryview(body)
        return cls(tuple(_decode_endpoint(view[i:i + ENDPOINT_LEN])
                         for i in range(0, len(body), ENDPOINT_LEN)))


Message = Ping | Pong | CallMeMaybe


def parse_message(plaintext: bytes) -> Message:
    """The message inside an opened box."""
    if len(plaintext) < 2:
        raise MalformedMessage("shorter than type and version")
    mtype, version, body = plaintext[0], plaintext[1], plaintext[2:]
    if mtype == PING:
        return Ping.decode(body)
    if mtype == PONG:
        return Pong.decode(body)
    if mtype == CALL_ME_MAYBE:
        return CallMeMaybe.decode(body, version)
    raise UnknownType(f"unknown disco message type 0x{mtype:02x}")


def looks_like_disco(packet: bytes) -> bool:
    """What a relay or a shared socket checks: the magic and room for the header (Tailscale's
    LooksLikeDiscoWrapper)."""
    return len(packet) >= HEADER_LEN and packet[:len(MAGIC)] == MAGIC


def sender_key(packet: bytes) -> bytes:
    """The sender's disco public key, the one to look the shared box up by."""
    if not looks_like_disco(packet):
        raise NotDisco("not a disco packet (short, or no magic)")
    return bytes(packet[len(MAGIC):len(MAGIC) + KEY_LEN])


def generate_private_key() -> bytes:
    return bytes(nacl.public.PrivateKey.generate())


def public_key(private: bytes) -> bytes:
    return bytes(nacl.public.PrivateKey(private).public_key)


class SharedBox:
    """The box between our disco key and one peer's, the shared key computed once (NaCl beforenm)."""

    def __init__(self, my_private: bytes, peer_public: bytes) -> None:
        if len(peer_public) != KEY_LEN:
            raise ValueError("a disco public key is 32 bytes")
        self.my_public = public_key(my_private)
        self.peer_public = bytes(peer_public)
        self._box = nacl.public.Box(nacl.public.PrivateKey(my_private), nacl.public.PublicKey(peer_public))

    def seal(self, message: Message, nonce: bytes | None = None) -> bytes:
        nonce = os.urandom(NONCE_LEN) if nonce is None else nonce
        return MAGIC + self.my_public + bytes(self._box.encrypt(message.encode(), nonce))

    def open(self, packet: bytes) -> Message:
        """Parse a packet from this peer; raises DiscoError for anything else."""
        if sender_key(packet) != self.peer_public:
            raise CannotOpen("the packet is from another disco key")
        if len(packet) < HEADER_LEN + BOX_OVERHEAD:
            raise NotDisco("shorter than header and box tag")
        try:
            plaintext = self._box.decrypt(bytes(packet[len(MAGIC) + KEY_LEN:]))
        except nacl.exceptions.CryptoError as exc:
            raise CannotOpen("the box does not open") from exc
        return parse_message(plaintext)
