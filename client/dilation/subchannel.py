"""L5: subchannels multiplexed over the durable L4 stream.

in:  app operations (open by subprotocol name, write, close, listen), inbound sequenced records
out: records to queue (through reliable.Outbound), app events (Accepted, Received, EndOfStream, Finished)
states per subchannel: open -> write_closed (we sent CLOSE) / read_closed (peer sent CLOSE) -> closed.

Ids: the Leader allocates odd ids from 1, the Follower even ids from 2; 0 is reserved. A CLOSE is a
half-close: data written before it is always delivered, writes after it are refused, and the subchannel is
finished once both directions are closed (magic-wormhole 0.24 answers a CLOSE with its own CLOSE at once,
so its subchannels finish as soon as ours closes). An OPEN for a name nobody listens to waits (up to
`max_pending_opens`) until someone listens; beyond that it is refused with a CLOSE.
"""

from __future__ import annotations

from dataclasses import dataclass

from .connection import Close, Data, Open
from .errors import SubchannelClosed
from .reliable import Inbound, Outbound

MAX_SCID = 2**32 - 1


@dataclass(frozen=True, slots=True)
class Accepted:
    scid: int
    subprotocol: str


@dataclass(frozen=True, slots=True)
class Pending:
    """An inbound OPEN nobody listens for yet: buffer its data until it is Accepted."""

    scid: int
    subprotocol: str


@dataclass(slots=True)  # not frozen: one per DATA record (see connection.Data)
class Received:
    scid: int
    data: bytes


@dataclass(frozen=True, slots=True)
class EndOfStream:
    scid: int


@dataclass(frozen=True, slots=True)
class Finished:
    scid: int


@dataclass(frozen=True, slots=True)
class Ignored:
    why: str


Event = Accepted | Pending | Received | EndOfStream | Finished | Ignored


class Subchannel:
    __slots__ = ("scid", "subprotocol", "state")

    def __init__(self, scid: int, subprotocol: str):
        self.scid = scid
        self.subprotocol = subprotocol
        self.state = "open"

    @property
    def writable(self) -> bool:
        return self.state in ("open", "read_closed")


class Mux:
    def __init__(self, *, leader: bool, outbound: Outbound, inbound: Inbound, max_pending_opens: int = 64):
        self._next_scid = 1 if leader else 2
        self.out = outbound
        self.inb = inbound
        self.max_pending_opens = max_pending_opens
        self.channels: dict[int, Subchannel] = {}
        self._listening: set[str] = set()
        self._pending: list[Subchannel] = []  # inbound OPENs waiting for a listener, in arrival order

    # -- local operations: each returns the records to send now
    def open(self, subprotocol: str) -> tuple[int, Open]:
        if not subprotocol:
            raise ValueError("subprotocol name must not be empty")
        scid = self._next_scid
        if scid > MAX_SCID:
            raise SubchannelClosed("subchannel ids exhausted")
        self._next_scid += 2
        self.channels[scid] = Subchannel(scid, subprotocol)
        return scid, self.out.open(scid, subprotocol)

    def write(self, scid: int, data: bytes) -> Data:
        sc = self.channels.get(scid)
        if sc is None or not sc.writable:
            raise SubchannelClosed(f"subchannel {scid} is closed for writing")
        return self.out.data(scid, data)

    def close(self, scid: int) -> tuple[Close | None, list[Event]]:
        """Half-close our direction. Closing twice is a no-op (the app need not know the state)."""
        sc = self.channels.get(scid)
        if sc is None or not sc.writable:
            return None, []
        rec = self.out.close(scid)
        if sc.state == "read_closed":
            sc.state = "closed"
            del self.channels[scid]
            return rec, [Finished(scid)]
        sc.state = "write_closed"
        return rec, []

    def listen(self, subprotocol: str) -> list[Event]:
        self._listening.add(subprotocol)
        ready = [sc for sc in self._pending if sc.subprotocol == subprotocol]
        self._pending = [sc for sc in self._pending if sc.subprotocol != subprotocol]
        return [Accepted(sc.scid, sc.subprotocol) for sc in ready]

    def is_pending(self, scid: int) -> bool:
        return any(sc.scid == scid for sc in self._pending)

    # -- inbound records
    def receive_data(self, r: Data) -> Received | Ignored | None:
        """receive() for a DATA record, the bulk of all traffic: one event, or None for a duplicate."""
        if not self.inb.accept(r.seqnum):
            return None
        sc = self.channels.get(r.scid)
        if sc is None or sc.state in ("read_closed", "closed"):
            return Ignored(f"DATA for unknown or read-closed subchannel {r.scid}")
        return Received(r.scid, r.data)

    def receive(self, r: Open | Data | Close) -> tuple[list[Event], list[Close]]:
        """Deliver one sequenced record. Returns (app events, records to send). Duplicates are dropped
        here; the caller ACKs every sequenced record regardless."""
        if type(r) is Data:
            ev = self.receive_data(r)
            return ([ev] if ev is not None else []), []
        if not self.inb.accept(r.seqnum):
            return [], []
        if isinstance(r, Open):
            if r.scid in self.channels or r.scid == 0:
                return [Ignored(f"duplicate OPEN for subchannel {r.scid}")], []
            sc = Subchannel(r.scid, r.subprotocol)
            self.channels[r.scid] = sc
            if r.subprotocol in self._listening:
                return [Accepted(r.scid, r.subprotocol)], []
            if len(self._pending) >= self.max_pending_opens:
                sc.state = "write_closed"
                return [Ignored(f"too many unaccepted OPENs, refusing {r.scid}")], [self.out.close(r.scid)]
            self._pending.append(sc)
            return [Pending(r.scid, r.subprotocol)], []
        sc = self.channels.get(r.scid)
        if sc is None:
            return [Ignored(f"CLOSE for unknown subchannel {r.scid}")], []
        if sc.state == "write_closed":
            sc.state = "closed"
            del self.channels[r.scid]
            self._pending = [p for p in self._pending if p.scid != r.scid]
            return [EndOfStream(r.scid), Finished(r.scid)], []
        if sc.state == "open":
            sc.state = "read_closed"
            return [EndOfStream(r.scid)], []
        return [Ignored(f"second CLOSE for subchannel {r.scid}")], []
