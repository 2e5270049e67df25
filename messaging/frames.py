"""Messaging frames, after the link handshake: `FrameType(1) | PayloadSize(2) | Payload`.

PayloadSize is a big-endian uint16 (the specification says uint16; Skywire writes big-endian), so a payload is at
most 65535 bytes. Payloads by type, sub-fields concatenated:

  0x0 OpenChannel     ChannelID(1) RemoteStatic(33) NoiseMessage1(49)   exactly 83 bytes
  0x1 ChannelOpened   ChannelID(1) NoiseMessage2(49)                    exactly 50 bytes
  0x2 CloseChannel    ChannelID(1)                                      exactly 1 byte
  0x3 ChannelClosed   ChannelID(1)                                      exactly 1 byte
  0x4 Send            ChannelID(1) CipherText                           4 + 16 .. 65535 bytes

CipherText is `Size(2, big-endian) || Noise ciphertext` as Skywire's channel writes it, Size being the
length of the ciphertext (its 16-byte tag included), and one Send frame carries one whole record.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import ProtocolError

OPEN_CHANNEL, CHANNEL_OPENED, CLOSE_CHANNEL, CHANNEL_CLOSED, SEND = 0, 1, 2, 3, 4
NAMES = {OPEN_CHANNEL: "OpenChannel", CHANNEL_OPENED: "ChannelOpened", CLOSE_CHANNEL: "CloseChannel",
         CHANNEL_CLOSED: "ChannelClosed", SEND: "Send"}

HEADER = struct.Struct(">BH")
HEADER_LEN = 3
PUBLIC_KEY_LEN = 33
NOISE_MESSAGE_LEN = 49  # 33-byte ephemeral key + 16-byte tag of the empty payload
TAG_LEN = 16
MAX_PAYLOAD = 0xFFFF
OPEN_LEN = 1 + PUBLIC_KEY_LEN + NOISE_MESSAGE_LEN
OPENED_LEN = 1 + NOISE_MESSAGE_LEN
SEND_OVERHEAD = 1 + 2  # channel ID and the ciphertext's size
MIN_SEND_LEN = SEND_OVERHEAD + TAG_LEN
MAX_CIPHERTEXT = MAX_PAYLOAD - SEND_OVERHEAD
MAX_PLAINTEXT = MAX_CIPHERTEXT - TAG_LEN  # 65516 bytes of application data per Send
FIXED_LEN = {OPEN_CHANNEL: OPEN_LEN, CHANNEL_OPENED: OPENED_LEN, CLOSE_CHANNEL: 1, CHANNEL_CLOSED: 1}


def header(frame_type: int, payload_len: int) -> bytes:
    return HEADER.pack(frame_type, payload_len)


def check_payload(frame_type: int, payload_len: int) -> None:
    """Raise ProtocolError unless a payload of this length is valid for this type (Send: see check_send)."""
    fixed = FIXED_LEN.get(frame_type)
    if fixed is not None:
        if payload_len != fixed:
            raise ProtocolError(f"{NAMES[frame_type]} payload must be {fixed} bytes, got {payload_len}",
                                "bad_length")
    elif frame_type == SEND:
        if payload_len < MIN_SEND_LEN:
            raise ProtocolError(f"Send payload of {payload_len} bytes is too short", "bad_length")
    else:
        raise ProtocolError(f"unknown frame type {frame_type}", "unknown_type")


def check_send(payload: bytes | memoryview) -> None:
    """The CipherText's own size must cover exactly the rest of the payload."""
    size = (payload[1] << 8) | payload[2]
    if size != len(payload) - SEND_OVERHEAD:
        raise ProtocolError(f"Send says {size} ciphertext bytes, carries {len(payload) - SEND_OVERHEAD}",
                            "send_size")


@dataclass(frozen=True, slots=True)
class OpenChannel:
    channel_id: int
    remote_static: bytes
    noise_message: bytes

    def encode(self) -> bytes:
        return header(OPEN_CHANNEL, OPEN_LEN) + bytes((self.channel_id,)) + self.remote_static + self.noise_message


@dataclass(frozen=True, slots=True)
class ChannelOpened:
    channel_id: int
    noise_message: bytes

    def encode(self) -> bytes:
        return header(CHANNEL_OPENED, OPENED_LEN) + bytes((self.channel_id,)) + self.noise_message


@dataclass(frozen=True, slots=True)
class CloseChannel:
    channel_id: int

    def encode(self) -> bytes:
        return bytes((CLOSE_CHANNEL, 0, 1, self.channel_id))


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    channel_id: int

    def encode(self) -> bytes:
        return bytes((CHANNEL_CLOSED, 0, 1, self.channel_id))


@dataclass(frozen=True, slots=True)
class Send:
    channel_id: int
    ciphertext: bytes

    def encode(self) -> bytes:
        n = len(self.ciphertext)
        if not TAG_LEN <= n <= MAX_CIPHERTEXT:
            raise ValueError(f"ciphertext of {n} bytes does not fit a Send frame")
        return header(SEND, n + SEND_OVERHEAD) + bytes((self.channel_id, n >> 8, n & 0xFF)) + self.ciphertext


Frame = OpenChannel | ChannelOpened | CloseChannel | ChannelClosed | Send


def decode_payload(frame_type: int, payload: bytes) -> Frame:
    check_payload(frame_type, len(payload))
    cid = payload[0]
    if frame_type == SEND:
        check_send(payload)
        return Send(cid, bytes(payload[SEND_OVERHEAD:]))
    if frame_type == OPEN_CHANNEL:
        return OpenChannel(cid, bytes(payload[1:1 + PUBLIC_KEY_LEN]), bytes(payload[1 + PUBLIC_KEY_LEN:]))
    if frame_type == CHANNEL_OPENED:
        return ChannelOpened(cid, bytes(payload[1:]))
    return CloseChannel(cid) if frame_type == CLOSE_CHANNEL else ChannelClosed(cid)


class FrameDecoder:
    """Incremental decoder: feed bytes, get whole validated frames; the buffer never exceeds one frame
    plus what one read brought."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        buf = self.buf
        buf += data
        out: list[Frame] = []
        pos, end = 0, len(buf)
        while end - pos >= HEADER_LEN:
            frame_type, n = HEADER.unpack_from(buf, pos)
            check_payload(frame_type, n)  # before waiting for the payload: reject early
            if end - pos - HEADER_LEN < n:
                break
            out.append(decode_payload(frame_type, bytes(buf[pos + HEADER_LEN:pos + HEADER_LEN + n])))
            pos += HEADER_LEN + n
        if pos:
            del buf[:pos]
        return out
