"""A messaging client's side of one link (after the handshake): its channels through that server (sans-IO).

in:  `receive_data(bytes)`; calls `open_channel(remote)`, `send(cid, data)`, `close_channel(cid)`,
     `close_timed_out(cid)`. out: `data_to_send()` and events (below); ProtocolError when the server
     breaks the frame rules (the link must then close).
states of a channel: opening (OpenChannel sent) -> open -> closing (CloseChannel sent) -> gone;
     incoming ones start open (ChannelOpened sent with Noise message 2).

Closing follows the specification: the side that sends CloseChannel only receives until ChannelClosed comes back
(or its timer runs out: `close_timed_out` sends ChannelClosed itself); the side that receives
CloseChannel answers ChannelClosed at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from . import frames as f
from . import keys
from .errors import ChannelError, KeyFormatError, ProtocolError
from .noise import ChannelNoise

SLOTS = 256
OPENING, OPEN, CLOSING = "opening", "open", "closing"


@dataclass(frozen=True, slots=True)
class ChannelReady:
    """Our OpenChannel was accepted; `remote` answered Noise message 2."""
    channel_id: int
    remote: bytes


@dataclass(frozen=True, slots=True)
class IncomingChannel:
    """`remote` opened a channel to us and we accepted it."""
    channel_id: int
    remote: bytes


@dataclass(frozen=True, slots=True)
class ChannelRefused:
    """Our OpenChannel was refused (by the server or the remote) or its Noise reply failed."""
    channel_id: int
    remote: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class Message:
    channel_id: int
    data: bytes


@dataclass(frozen=True, slots=True)
class ChannelEnded:
    """The channel is fully closed. `reason`: closed (we closed, the remote confirmed), close_timeout (we
    closed, no confirmation came), remote_closed, decrypt (a ciphertext failed), link_lost."""
    channel_id: int
    remote: bytes
    reason: str


Event = ChannelReady | IncomingChannel | ChannelRefused | Message | ChannelEnded


class _Channel:
    __slots__ = ("remote", "noise", "state")

    def __init__(self, remote: bytes, noise: ChannelNoise, state: str) -> None:
        self.remote, self.noise, self.state = remote, noise, state


class ClientLink:
    """`accept(remote_key)` decides whether an incoming channel is taken (default: all)."""

    def __init__(self, local: keys.SecretKey, accept: Callable[[bytes], bool] = lambda _key: True) -> None:
        self.local = local
        self.accept = accept
        self.channels: dict[int, _Channel] = {}
        self.stats: Counter[str] = Counter()
        self._decoder = f.FrameDecoder()
        self._out = bytearray()
        self._cursor = 0  # next ID tried for channels we open (upward; the server goes downward)

    # ---- commands
    def open_channel(self, remote: bytes) -> int:
        """Queue OpenChannel to `remote`; returns the channel ID. Raises ChannelError when all 256 are used."""
        cid = self._free_id()
        noise = ChannelNoise(self.local, remote, initiator=True)
        self.channels[cid] = _Channel(remote, noise, OPENING)
        self._out += f.OpenChannel(cid, remote, noise.message1()).encode()
        return cid

    def send(self, cid: int, data: bytes) -> None:
        ch = self.channels.get(cid)
        if ch is None or ch.state != OPEN:
            raise ChannelError(f"channel {cid} is not open for sending", "not_open")
        if len(data) > f.MAX_PLAINTEXT:
            raise ValueError(f"at most {f.MAX_PLAINTEXT} bytes per message")
        ct = ch.noise.encrypt(data)
        n = len(ct)
        self._out += f.header(f.SEND, n + 3) + bytes((cid, n >> 8, n & 0xFF)) + ct

    def close_channel(self, cid: int) -> None:
        """Send CloseChannel; the channel only receives until ChannelClosed arrives."""
        ch = self.channels.get(cid)
        if ch is None or ch.state == CLOSING:
            return
        ch.state = CLOSING
        self._out += f.CloseChannel(cid).encode()

    def close_timed_out(self, cid: int) -> Event | None:
        """No ChannelClosed came in time: send it ourselves, the channel is fully closed."""
        ch = self.channels.get(cid)
        if ch is None or ch.state != CLOSING:
            return None
        del self.channels[cid]
        self._out += f.ChannelClosed(cid).encode()
        return ChannelEnded(cid, ch.remote, "close_timeout")

    def data_to_send(self) -> bytes:
        out, self._out = bytes(self._out), bytearray()
        return out

    def lost(self) -> list[Event]:
        """The link is gone: every channel on it ends."""
        events: list[Event] = [ChannelRefused(cid, ch.remote, "link_lost") if ch.state == OPENING
                               else ChannelEnded(cid, ch.remote, "link_lost") for cid, ch in self.channels.items()]
        self.channels.clear()
        return events

    # ---- input
    def receive_data(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        for frame in self._decoder.feed(data):
            ev = self._frame(frame)
            if ev is not None:
                events.append(ev)
        return events

    def _frame(self, frame: f.Frame) -> Event | None:
        cid = frame.channel_id
        ch = self.channels.get(cid)
        if type(frame) is f.Send:
            if ch is None or ch.state == OPENING:
                self.stats["dropped_unknown_channel"] += 1
                return None
            try:
                return Message(cid, ch.noise.decrypt(frame.ciphertext))
            except ChannelError:
                self.stats["decrypt_failed"] += 1
                del self.channels[cid]
                self._out += f.ChannelClosed(cid).encode()
                return ChannelEnded(cid, ch.remote, "decrypt")
        if type(frame) is f.OpenChannel:
            return self._incoming(frame, ch)
        if ch is None:
            self.stats["dropped_unknown_channel"] += 1
            return None
        if type(frame) is f.ChannelOpened:
            if ch.state == CLOSING:  # we closed it while it was opening; ChannelClosed will follow
                self.stats["dropped_closing"] += 1
                return None
            if ch.state != OPENING:
                raise ProtocolError(f"ChannelOpened for channel {cid}, which is not opening", "unexpected_opened")
            try:
                ch.noise.read_message2(frame.noise_message)
            except ChannelError as exc:
                del self.channels[cid]
                self._out += f.ChannelClosed(cid).encode()
                return ChannelRefused(cid, ch.remote, exc.reason)
            ch.state = OPEN
            return ChannelReady(cid, ch.remote)
        del self.channels[cid]
        if type(frame) is f.CloseChannel:
            self._out += f.ChannelClosed(cid).encode()
            return ChannelEnded(cid, ch.remote, "remote_closed")
        if ch.state == OPENING:  # ChannelClosed
            return ChannelRefused(cid, ch.remote, "refused")
        return ChannelEnded(cid, ch.remote, "closed" if ch.state == CLOSING else "remote_closed")

    def _incoming(self, frame: f.OpenChannel, existing: _Channel | None) -> Event | None:
        cid, remote = frame.channel_id, frame.remote_static
        if existing is not None:
            if existing.state == OPENING:  # our OpenChannel(cid) crossed the server's: refuse each other
                self.stats["refused_crossed"] += 1
                self._out += f.ChannelClosed(cid).encode()
                return None
            raise ProtocolError(f"OpenChannel for channel {cid}, which is in use", "channel_in_use")
        try:
            keys.parse_public_key(remote)
            if not self.accept(remote):
                raise ChannelError("not accepted", "not_accepted")
            noise = ChannelNoise(self.local, remote, initiator=False)
            reply = noise.read_message1(frame.noise_message)
        except (ChannelError, KeyFormatError) as exc:
            self.stats[f"refused_{getattr(exc, 'reason', 'bad_key')}"] += 1
            self._out += f.ChannelClosed(cid).encode()
            return None
        self.channels[cid] = _Channel(remote, noise, OPEN)
        self._out += f.ChannelOpened(cid, reply).encode()
        return IncomingChannel(cid, remote)

    def _free_id(self) -> int:
        for step in range(SLOTS):
            cid = (self._cursor + step) % SLOTS
            if cid not in self.channels:
                self._cursor = (cid + 1) % SLOTS
                return cid
        raise ChannelError("all 256 channel IDs of this link are in use", "channels_full")
