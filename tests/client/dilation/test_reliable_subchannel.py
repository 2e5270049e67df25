import random

import pytest

from burrow.client.dilation.connection import Ack, Close, Data, Open
from burrow.client.dilation.errors import ProtocolError, SubchannelClosed
from burrow.client.dilation.reliable import Inbound, Outbound
from burrow.client.dilation.subchannel import Accepted, EndOfStream, Finished, Ignored, Mux, Pending, Received


def make(leader: bool, **kw) -> Mux:
    return Mux(leader=leader, outbound=Outbound(**kw), inbound=Inbound())


def test_seqnums_ack_retires_prefix():
    out = Outbound()
    recs = [out.open(1, "x"), out.data(1, b"abc"), out.data(1, b"de"), out.close(1)]
    assert [r.seqnum for r in recs] == [0, 1, 2, 3]
    assert out.unacked_bytes == 9 + 12 + 11 + 9
    assert out.ack(1) == 2
    assert out.unacked() == recs[2:]
    assert out.ack(1) == 0  # repeated ACK is harmless
    assert out.ack(3) == 2 and len(out) == 0 and out.unacked_bytes == 0
    with pytest.raises(ProtocolError):
        out.ack(4)


def test_backpressure_flag():
    out = Outbound(max_unacked_bytes=100)
    out.data(1, b"x" * 50)
    assert not out.full
    out.data(1, b"x" * 50)
    assert out.full
    out.ack(1)
    assert not out.full


def test_inbound_watermark_drops_duplicates():
    inb = Inbound()
    assert [inb.accept(s) for s in (0, 1, 1, 0, 2, 5, 3)] == [True, True, False, False, True, True, False]


def test_subchannel_ids_leader_odd_follower_even():
    leader, follower = make(True), make(False)
    assert [leader.open("p")[0] for _ in range(3)] == [1, 3, 5]
    assert [follower.open("p")[0] for _ in range(3)] == [2, 4, 6]
    with pytest.raises(ValueError):
        leader.open("")


def test_open_waits_for_listener_then_accepted():
    a, b = make(True), make(False)
    scid, rec = a.open("echo")
    assert b.receive(rec) == ([Pending(scid, "echo")], [])  # nobody listens yet: queued
    assert b.is_pending(scid)
    ev, _ = b.receive(a.write(scid, b"early"))
    assert ev == [Received(scid, b"early")]  # buffered by the adapter until accepted
    assert b.listen("echo") == [Accepted(scid, "echo")]
    scid2, rec2 = a.open("echo")
    assert b.receive(rec2) == ([Accepted(scid2, "echo")], [])


def test_too_many_pending_opens_are_refused_with_close():
    a, b = make(True), Mux(leader=False, outbound=Outbound(), inbound=Inbound(), max_pending_opens=1)
    b.receive(a.open("x")[1])
    scid, rec = a.open("x")
    events, replies = b.receive(rec)
    assert isinstance(events[0], Ignored) and replies == [Close(scid, 0)]
    assert a.receive(replies[0]) == ([EndOfStream(scid)], [])


def test_close_semantics_half_close_both_orders():
    a, b = make(True), make(False)
    b.listen("p")
    scid, rec = a.open("p")
    b.receive(rec)
    # data written before close is delivered; writes after close are refused
    d1 = a.write(scid, b"before")
    c1, ev = a.close(scid)
    assert ev == [] and isinstance(c1, Close)
    with pytest.raises(SubchannelClosed):
        a.write(scid, b"after")
    assert a.close(scid) == (None, [])  # closing twice is a no-op
    assert b.receive(d1)[0] == [Received(scid, b"before")]
    assert b.receive(c1)[0] == [EndOfStream(scid)]
    # b may still write after the peer's half-close; a (closing) still receives it
    d2 = b.write(scid, b"reply")
    assert a.receive(d2)[0] == [Received(scid, b"reply")]
    c2, ev = b.close(scid)
    assert ev == [Finished(scid)]
    assert a.receive(c2)[0] == [EndOfStream(scid), Finished(scid)]
    assert scid not in a.channels and scid not in b.channels
    # anything later for the finished subchannel is ignored
    assert isinstance(a.receive(Data(scid, 99, b"late"))[0][0], Ignored)


def test_duplicate_open_and_unknown_close_ignored():
    b = make(False)
    b.listen("p")
    assert b.receive(Open(1, 0, "p"))[0] == [Accepted(1, "p")]
    assert isinstance(b.receive(Open(1, 1, "p"))[0][0], Ignored)
    assert isinstance(b.receive(Close(9, 2))[0][0], Ignored)
    # a replayed (old) record is dropped silently, the caller still ACKs it
    assert b.receive(Open(1, 0, "p")) == ([], [])


class Side:
    def __init__(self, leader):
        self.mux = make(leader)
        self.got: dict[int, bytearray] = {}
        self.eof: set[int] = set()

    def deliver(self, r, net_back: list):
        if isinstance(r, Ack):
            self.mux.out.ack(r.resp_seqnum)
            return
        events, replies = self.mux.receive(r)
        net_back.extend(replies)
        for ev in events:
            if isinstance(ev, Received):
                self.got.setdefault(ev.scid, bytearray()).extend(ev.data)
            elif isinstance(ev, EndOfStream):
                self.eof.add(ev.scid)
        net_back.append(Ack(self.mux.inb.watermark))


@pytest.mark.parametrize("seed", range(5))
def test_retransmit_across_connection_losses_exactly_once(seed):
    """Records in flight are lost at random cuts; every new connection re-sends the unacked queue in order.
    The receiver ends with every byte exactly once, in order."""
    rng = random.Random(seed)
    a, b = Side(True), Side(False)
    b.mux.listen("bulk")
    scid, rec = a.mux.open("bulk")
    to_b: list = [rec]
    to_a: list = []
    expected = bytearray()
    for i in range(300):
        chunk = bytes([i % 256]) * rng.randint(1, 50)
        expected += chunk
        to_b.append(a.mux.write(scid, chunk))
        if rng.random() < 0.1:  # connection cut: whatever is in flight is gone, then resend on reconnect
            keep = rng.randint(0, len(to_b))
            for r in to_b[:keep]:
                b.deliver(r, to_a)
            for r in to_a[: rng.randint(0, len(to_a))]:
                a.deliver(r, [])
            to_b, to_a = a.mux.out.unacked(), b.mux.out.unacked()
        elif rng.random() < 0.5:
            for r in to_b:
                b.deliver(r, to_a)
            to_b = []
            for r in to_a:
                a.deliver(r, to_b)
            to_a = []
    close, _ = a.mux.close(scid)
    to_b.append(close)
    for _ in range(3):
        for r in to_b:
            b.deliver(r, to_a)
        to_b = []
        for r in to_a:
            a.deliver(r, to_b)
        to_a = []
    assert bytes(b.got[scid]) == bytes(expected)
    assert scid in b.eof
    assert len(a.mux.out) == 0  # everything acknowledged and retired
