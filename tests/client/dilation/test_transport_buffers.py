"""L2Protocol's receive buffers: records are opened in place in them, so a buffer is read into again only
once no payload view of it is left."""

from __future__ import annotations

from burrow.client.dilation.l2protocol import L2Protocol
from burrow.client.dilation.noise import NoiseSession

KEY = bytes(range(32))


def test_a_buffer_is_reused_only_when_no_view_of_it_is_left():
    p = L2Protocol(connector=None, attempt=None)
    first = p.get_buffer(-1)
    buf = id(first.obj)  # not a reference: holding one would keep the buffer busy
    held = first[10:20]  # a record payload a subchannel reader still holds
    p._rbuf = first = None  # what buffer_updated does once the read is handled
    second = p.get_buffer(-1)
    assert id(second.obj) != buf
    p._rbuf = second = None
    held = None  # the reader returned it to the app (as a copy)
    assert held is None
    assert id(p.get_buffer(-1).obj) == buf


def test_a_one_message_frame_in_a_writable_buffer_is_opened_in_place():
    leader, follower = NoiseSession(KEY, leader=True), NoiseSession(KEY, leader=False)
    leader.leader_finish(follower.follower_answer(leader.leader_hello()))
    frame = bytearray(leader.encrypt(b"in place please"))
    plain = follower.decrypt(memoryview(frame))
    assert bytes(plain) == b"in place please" and plain.obj is frame
    assert follower.decrypt(leader.encrypt(b"from bytes")) == b"from bytes"  # read-only input: a new object
