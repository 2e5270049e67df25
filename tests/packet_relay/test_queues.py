"""The per-client send queue: packets added in one step when they fit, one by one (drop-oldest) when not."""

from burrow.packet_relay.queues import SendQueue


def test_packets_that_fit_are_queued_at_once_and_drained_in_order_with_their_payload():
    q = SendQueue(depth=4)
    assert q.push_packets([b"hdr-a", b"hdr-bb"], 4)
    assert q.push_packets([b"hdr-ccc", b"hdr-d"], 4) and q.full()
    assert q.drain() == (b"hdr-ahdr-bbhdr-ccchdr-d", 4, 1 + 2 + 3 + 1)


def test_packets_that_would_overflow_are_left_to_the_one_by_one_path():
    q = SendQueue(depth=4)
    assert not q.push_packet(b"old", 3)
    assert not q.push_packets([b"a", b"b", b"c", b"d"], 0)   # 1 + 4 > 4: nothing queued
    assert len(q) == 1
    assert q.push_packets([b"a", b"b", b"c"], 0) and q.drain() == (b"oldabc", 4, 6)
