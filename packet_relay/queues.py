"""Per-client bounded send queue with drop-oldest, protocol-neutral.

Packets wait here between the sender's read loop and the receiver's socket; the reader never
blocks on a slow receiver. When the queue is full the oldest packet goes (`queue_head`), because a
fresh packet is worth more to a tunnel than a stale one. Control frames (PeerGone, Pong, KeepAlive,
Restarting) wait in a separate small list so a packet flood cannot push them out.
"""

from __future__ import annotations

from collections import deque

DEFAULT_DEPTH = 32
CONTROL_DEPTH = 64


class SendQueue:
    __slots__ = ("depth", "_packets", "_control")

    def __init__(self, depth: int = DEFAULT_DEPTH) -> None:
        self.depth = max(1, depth)
        self._packets: deque[tuple[bytes, int]] | None = None  # created lazily: idle clients stay small
        self._control: list[bytes] | None = None

    def __len__(self) -> int:
        return (len(self._packets) if self._packets else 0) + (len(self._control) if self._control else 0)

    def full(self) -> bool:
        return self._packets is not None and len(self._packets) >= self.depth

    def push_packet(self, frame: bytes, payload_len: int) -> bool:
        """Queue one packet frame; returns True when the oldest one had to be dropped."""
        q = self._packets
        if q is None:
            q = self._packets = deque()
        dropped = False
        if len(q) >= self.depth:
            q.popleft()
            dropped = True
        q.append((frame, payload_len))
        return dropped

    def push_packets(self, frames: list[bytes], overhead: int) -> bool:
        """Queue packet frames (payload: each frame's length less `overhead`) when all of them fit without
        a drop, in one step rather than one call per packet; returns False, queueing nothing, otherwise."""
        q = self._packets
        if q is None:
            q = self._packets = deque()
        if len(q) + len(frames) > self.depth:
            return False
        q.extend(zip(frames, map(overhead.__rsub__, map(len, frames)), strict=True))
        return True

    def push_control(self, frame: bytes) -> bool:
        """Queue a control frame; returns False (and drops it) when the control list is full."""
        c = self._control
        if c is None:
            c = self._control = []
        if len(c) >= CONTROL_DEPTH:
            return False
        c.append(frame)
        return True

    def drain(self) -> tuple[bytes, int, int]:
        """Everything queued as one byte string, with the packet count and payload bytes in it."""
        parts: list[bytes] = []
        packets = nbytes = 0
        if self._control:
            parts.extend(self._control)
            self._control = None
        if self._packets:
            for frame, plen in self._packets:
                parts.append(frame)
                nbytes += plen
            packets = len(self._packets)
            self._packets = None
        return b"".join(parts), packets, nbytes

    def discard(self) -> int:
        """Drop whatever is left (the client went away); returns how many packets were lost."""
        lost = len(self._packets) if self._packets else 0
        self._packets = None
        self._control = None
        return lost
