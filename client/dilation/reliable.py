"""L4: reliable delivery across connections.

in:  OPEN/DATA/CLOSE to send (Outbound.queue), inbound ACKs (Outbound.ack), inbound sequenced records
     (Inbound.accept), a new connection (Outbound.unacked to re-send)
out: records with sequence numbers; retirement of acknowledged records; duplicate detection;
     `full` for backpressure (the writers pause while the unacknowledged bytes exceed the limit)
states: none beyond counters; sequence numbers are per direction and start at 0.

Every sequenced record stays queued until the peer ACKs it (an ACK retires everything up to and including its
number), and the whole queue is re-sent in order on every new connection. The receiver ACKs every sequenced
record, duplicates included, and drops any record at or below its watermark.
"""

from __future__ import annotations

from collections import deque

from .connection import Close, Data, Open
from .errors import DilationError, ProtocolError

MAX_SEQNUM = 2**32 - 1
DEFAULT_MAX_UNACKED_BYTES = 32 * 1024 * 1024


def record_size(r: Open | Data | Close) -> int:
    return 9 + len(r.data) if type(r) is Data else 9


class Outbound:
    def __init__(self, max_unacked_bytes: int = DEFAULT_MAX_UNACKED_BYTES):
        self.max_unacked_bytes = max_unacked_bytes
        self._next = 0
        self._queue: deque[Open | Data | Close] = deque()
        self.unacked_bytes = 0

    def _seq(self) -> int:
        seq = self._next
        if seq > MAX_SEQNUM:
            raise DilationError("outbound sequence numbers exhausted")
        self._next += 1
        return seq

    def open(self, scid: int, subprotocol: str) -> Open:
        return self._push(Open(scid, self._seq(), subprotocol))

    def data(self, scid: int, payload: bytes) -> Data:
        return self._push(Data(scid, self._seq(), payload))

    def close(self, scid: int) -> Close:
        return self._push(Close(scid, self._seq()))

    def _push(self, r):
        self._queue.append(r)
        self.unacked_bytes += record_size(r)
        return r

    @property
    def full(self) -> bool:
        return self.unacked_bytes >= self.max_unacked_bytes

    def ack(self, resp_seqnum: int) -> int:
        """Retire every record with seqnum <= resp_seqnum; returns how many were retired."""
        if resp_seqnum >= self._next:
            raise ProtocolError(f"ACK {resp_seqnum} for a record never sent (next is {self._next})")
        n = 0
        q = self._queue
        while q and q[0].seqnum <= resp_seqnum:
            self.unacked_bytes -= record_size(q.popleft())
            n += 1
        return n

    def unacked(self) -> list[Open | Data | Close]:
        """Everything to re-send, in order, on a new connection."""
        return list(self._queue)

    def __len__(self) -> int:
        return len(self._queue)


class Inbound:
    def __init__(self) -> None:
        self.watermark = -1  # highest sequence number delivered

    def accept(self, seqnum: int) -> bool:
        """True if the record is new (deliver it); False for a duplicate (ACK it, drop it)."""
        if seqnum <= self.watermark:
            return False
        self.watermark = seqnum
        return True
