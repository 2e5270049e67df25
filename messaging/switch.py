"""The messaging server's core: links, their 256-slot channel tables, and frame forwarding (sans-IO).

in:  `feed(link, bytes)` with a link's bytes after its handshake; `link_lost(link)`.
out: bytes appended to each link's `outbox` (the adapter writes them; `dirty` lists links that have
     some), counters in `stats`, and ProtocolError for the one link that broke the rules.
states of a channel: opening (OpenChannel forwarded) -> open (ChannelOpened forwarded) -> closing
     (CloseChannel forwarded) -> freed (a ChannelClosed from either side, or either link lost).

A channel joins slot `a_id` on the opener's link `a` and slot `b_id` on the responder's link `b`; the
server picks `b_id` (specification: "unique between the server and the second client"). The server takes IDs
from 255 downward and round-robin, clients from 0 upward, so crossing OpenChannels are rare and a freed
ID is not handed out again at once; when they do cross, each side refuses the other's with ChannelClosed.
Send frames keep their bytes; only the channel ID byte is rewritten.
"""

from __future__ import annotations

from collections import Counter

from . import frames as f
from .errors import ProtocolError

SLOTS = 256
OPENING, OPEN, CLOSING = 1, 2, 3
_SEND, _OPEN, _OPENED, _CLOSE, _CLOSED = f.SEND, f.OPEN_CHANNEL, f.CHANNEL_OPENED, f.CLOSE_CHANNEL, f.CHANNEL_CLOSED
_MIN_SEND, _MAX_BUFFERED = f.MIN_SEND_LEN, f.HEADER_LEN + f.MAX_PAYLOAD


class Channel:
    __slots__ = ("a", "a_id", "b", "b_id", "state")

    def __init__(self, a: Link, a_id: int, b: Link, b_id: int) -> None:
        self.a, self.a_id, self.b, self.b_id = a, a_id, b, b_id
        self.state = OPENING

    def other(self, link: Link, cid: int) -> tuple[Link, int]:
        if self.a is link and self.a_id == cid:
            return self.b, self.b_id
        return self.a, self.a_id


class Link:
    """One client's link as the switch sees it. `key` is the client's public key (33 bytes)."""

    __slots__ = ("key", "owner", "slots", "open_channels", "outbox", "inbuf", "cursor", "alive", "channels_opened",
                 "frames_in", "frames_out", "sends_in", "sends_out", "bytes_in", "bytes_out")

    def __init__(self, key: bytes, owner=None) -> None:
        self.key = key
        self.owner = owner  # the adapter's connection object
        self.slots: list[Channel | None] = [None] * SLOTS
        self.open_channels = 0
        self.outbox = bytearray()
        self.inbuf = bytearray()
        self.cursor = SLOTS - 1  # the next ID the server tries for a channel towards this client
        self.alive = True
        self.channels_opened = 0  # channels this client opened that were accepted
        self.frames_in = self.frames_out = self.sends_in = self.sends_out = self.bytes_in = self.bytes_out = 0

    def free_id(self) -> int | None:
        """The next free slot at or below the cursor, wrapping; None when all 256 are taken."""
        if self.open_channels >= SLOTS:
            return None
        slots, i = self.slots, self.cursor
        for _ in range(SLOTS):
            if slots[i] is None:
                self.cursor = (i - 1) % SLOTS
                return i
            i = (i - 1) % SLOTS
        return None


class Switch:
    def __init__(self) -> None:
        self.links: dict[bytes, Link] = {}
        self.dirty: list[Link] = []
        self.stats: Counter[str] = Counter()  # frames_<type>, sends_forwarded, refused_<reason>, dropped_<reason>
        self.channels_opened = 0

    # ---- links
    def add_link(self, key: bytes, owner=None) -> tuple[Link, Link | None]:
        """Register a link after its handshake; returns (link, the older link of the same key or None).

        The caller closes the older one (newest wins, like a client reconnecting after a network change).
        """
        link = Link(key, owner)
        old = self.links.get(key)
        self.links[key] = link
        return link, old

    def link_lost(self, link: Link) -> None:
        """The link is gone: every channel on it is closed towards its other end."""
        if not link.alive:
            return
        link.alive = False
        if self.links.get(link.key) is link:
            del self.links[link.key]
        for cid, ch in enumerate(link.slots):
            if ch is None:
                continue
            peer, pid = ch.other(link, cid)
            link.slots[cid] = None
            if peer is not link and peer.slots[pid] is ch:
                peer.slots[pid] = None
                peer.open_channels -= 1
                self._emit(peer, bytes((_CLOSED, 0, 1, pid)))
        link.open_channels = 0
        link.outbox.clear()
        link.inbuf.clear()

    def _emit(self, link: Link, frame: bytes) -> None:
        if not link.alive:
            return
        if not link.outbox:
            self.dirty.append(link)
        link.outbox += frame
        link.frames_out += 1

    def _free(self, ch: Channel) -> None:
        for link, cid in ((ch.a, ch.a_id), (ch.b, ch.b_id)):
            if link.slots[cid] is ch:
                link.slots[cid] = None
                link.open_channels -= 1

    # ---- input
    def feed(self, link: Link, data: bytes) -> None:
        """Process every whole frame in `data` (plus what an earlier call left); raises ProtocolError.

        The hot path is a run of Send frames on one channel: they are checked one by one, their channel
        ID byte is rewritten in place, and the whole run is copied to the peer's outbox at once.
        """
        if link.inbuf:
            link.inbuf += data
            buf = link.inbuf
            link.inbuf = bytearray()
        else:
            buf = bytearray(data)
        end = len(buf)
        pos = 0
        view = memoryview(buf)
        slots = link.slots
        sends = nbytes = frames = 0
        try:
            while end - pos >= 3:
                if buf[pos] != _SEND:
                    ftype = buf[pos]
                    n = (buf[pos + 1] << 8) | buf[pos + 2]
                    f.check_payload(ftype, n)
                    if end - pos - 3 < n:
                        break
                    frames += 1
                    self._control(link, ftype, view[pos + 3:pos + 3 + n])
                    pos += 3 + n
                    continue
                # a run of Send frames on one channel, from `run` to `pos`
                run = pos
                cid = -1
                pid = 0
                count = size = 0
                while end - pos >= 4 and buf[pos] == _SEND and (cid < 0 or buf[pos + 3] == cid):
                    n = (buf[pos + 1] << 8) | buf[pos + 2]
                    if n < _MIN_SEND:
                        f.check_payload(_SEND, n)
                    if end - pos - 3 < n:
                        break
                    if ((buf[pos + 4] << 8) | buf[pos + 5]) != n - 3:
                        f.check_send(view[pos + 3:pos + 3 + n])
                    if cid < 0:
                        cid = buf[pos + 3]
                        ch = slots[cid]
                        if ch is None or ch.state == OPENING:
                            ch = None
                        elif ch.a is link and ch.a_id == cid:
                            peer, pid = ch.b, ch.b_id
                        else:
                            peer, pid = ch.a, ch.a_id
                    buf[pos + 3] = pid
                    count += 1
                    size += n - 3
                    pos += 3 + n
                if count == 0:
                    break  # a partial frame waits for more bytes
                frames += count
                if ch is None:
                    self.stats["dropped_not_open" if slots[cid] is not None else "dropped_unknown_channel"] += count
                    continue
                out = peer.outbox
                if not out:
                    self.dirty.append(peer)
                out += view[run:pos]
                peer.frames_out += count
                peer.sends_out += count
                peer.bytes_out += size
                sends += count
                nbytes += size
        finally:
            link.frames_in += frames
            link.sends_in += sends
            link.bytes_in += nbytes
            self.stats["sends_forwarded"] += sends
            self.stats["bytes_forwarded"] += nbytes
        if pos < end:
            if end - pos > _MAX_BUFFERED:  # cannot happen with a valid header; keeps the bound explicit
                raise ProtocolError("frame larger than the largest frame", "bad_length")
            link.inbuf += view[pos:]

    def _control(self, link: Link, ftype: int, payload: memoryview) -> None:
        cid = payload[0]
        ch = link.slots[cid]
        self.stats[f"frames_{f.NAMES[ftype]}"] += 1
        if ftype == _OPEN:
            self._open(link, cid, ch, bytes(payload[1:1 + f.PUBLIC_KEY_LEN]), payload[1 + f.PUBLIC_KEY_LEN:])
        elif ch is None:
            self.stats["dropped_unknown_channel"] += 1
            if ftype == _CLOSE:  # nothing to close: let the client finish its side
                self._emit(link, bytes((_CLOSED, 0, 1, cid)))
        elif ftype == _OPENED:
            if ch.b is not link or ch.b_id != cid or ch.state == OPEN:
                raise ProtocolError("ChannelOpened for a channel this client did not receive", "unexpected_opened")
            if ch.state == CLOSING:  # the opener closed it meanwhile; the CloseChannel is on its way
                self.stats["dropped_closing"] += 1
                return
            ch.state = OPEN
            self.channels_opened += 1
            ch.a.channels_opened += 1
            self._emit(ch.a, f.header(_OPENED, f.OPENED_LEN) + bytes((ch.a_id,)) + payload[1:])
        elif ftype == _CLOSE:
            peer, pid = ch.other(link, cid)
            ch.state = CLOSING
            self._emit(peer, bytes((_CLOSE, 0, 1, pid)))
        else:  # ChannelClosed: a refusal, the answer to CloseChannel, or a close timeout; frees both slots
            peer, pid = ch.other(link, cid)
            self._free(ch)
            self._emit(peer, bytes((_CLOSED, 0, 1, pid)))

    def _open(self, link: Link, cid: int, existing: Channel | None, remote: bytes, message: memoryview) -> None:
        if existing is not None:
            if existing.state == OPENING and existing.b is link and existing.b_id == cid:
                self._refuse(link, cid, "id_crossed")  # our OpenChannel(cid) to this client is in flight
                return
            raise ProtocolError(f"OpenChannel reuses channel ID {cid}, which is in use", "channel_in_use")
        target = self.links.get(remote)
        if target is None:
            self._refuse(link, cid, "unknown_remote")
            return
        link.slots[cid] = Channel(link, cid, link, cid)  # holds cid while a slot is found (target may be link)
        tid = target.free_id()
        if tid is None:
            link.slots[cid] = None
            self._refuse(link, cid, "channels_full")
            return
        ch = Channel(link, cid, target, tid)
        link.slots[cid] = ch
        target.slots[tid] = ch
        link.open_channels += 1
        target.open_channels += 1
        self._emit(target, f.header(_OPEN, f.OPEN_LEN) + bytes((tid,)) + link.key + message)

    def _refuse(self, link: Link, cid: int, reason: str) -> None:
        self.stats[f"refused_{reason}"] += 1
        self._emit(link, bytes((_CLOSED, 0, 1, cid)))

    def take_dirty(self) -> list[Link]:
        dirty, self.dirty = self.dirty, []
        return dirty
