"""The server switch and the client link state machine together, with no sockets: bytes are moved by hand."""

from __future__ import annotations

import pytest

from burrow.messaging import frames as f
from burrow.messaging import keys
from burrow.messaging.client_link import (
    ChannelEnded,
    ChannelReady,
    ChannelRefused,
    ClientLink,
    IncomingChannel,
    Message,
)
from burrow.messaging.errors import ProtocolError
from burrow.messaging.switch import Switch


class Net:
    """One switch and its clients; `pump` moves bytes both ways until nothing moves."""

    def __init__(self) -> None:
        self.switch = Switch()
        self.clients: dict[str, tuple[ClientLink, object]] = {}
        self.events: dict[str, list] = {}

    def join(self, name: str, accept=lambda key: True) -> ClientLink:
        key = keys.SecretKey.generate()
        client = ClientLink(key, accept)
        link, _old = self.switch.add_link(key.public)
        self.clients[name] = (client, link)
        self.events[name] = []
        return client

    def key(self, name: str) -> bytes:
        return self.clients[name][0].local.public

    def pump(self) -> None:
        for _ in range(100):
            moved = False
            for client, link in self.clients.values():
                out = client.data_to_send()
                if out:
                    moved = True
                    self.switch.feed(link, out)
            for link in self.switch.take_dirty():
                for name, (client, mine) in self.clients.items():
                    if mine is link and link.outbox:
                        moved = True
                        data, link.outbox[:] = bytes(link.outbox), b""
                        self.events[name] += client.receive_data(data)
            if not moved:
                return
        raise AssertionError("bytes kept moving")

    def take(self, name: str) -> list:
        got, self.events[name] = self.events[name], []
        return got


def open_pair(net: Net, a: str, b: str) -> tuple[int, int]:
    cid = net.clients[a][0].open_channel(net.key(b))
    net.pump()
    ready = net.take(a)
    incoming = net.take(b)
    assert ready == [ChannelReady(cid, net.key(b))]
    assert len(incoming) == 1 and type(incoming[0]) is IncomingChannel and incoming[0].remote == net.key(a)
    return cid, incoming[0].channel_id


def test_open_send_both_ways_and_close():
    net = Net()
    a, b = net.join("a"), net.join("b")
    ca, cb = open_pair(net, "a", "b")
    assert ca == 0 and cb == 255  # clients count up, the server down
    for i in range(25):  # past two rekeys
        a.send(ca, b"ping %d" % i)
        b.send(cb, b"pong %d" % i)
    net.pump()
    assert net.take("b") == [Message(cb, b"ping %d" % i) for i in range(25)]
    assert net.take("a") == [Message(ca, b"pong %d" % i) for i in range(25)]
    a.close_channel(ca)
    net.pump()
    assert net.take("b") == [ChannelEnded(cb, net.key("a"), "remote_closed")]
    assert net.take("a") == [ChannelEnded(ca, net.key("b"), "closed")]
    assert a.channels == {} and b.channels == {}
    assert all(s is None for _, link in net.clients.values() for s in link.slots)
    assert net.switch.stats["sends_forwarded"] == 50


def test_open_to_an_unknown_key_is_refused():
    net = Net()
    a = net.join("a")
    stranger = keys.SecretKey.generate().public
    cid = a.open_channel(stranger)
    net.pump()
    assert net.take("a") == [ChannelRefused(cid, stranger, "refused")]
    assert net.switch.stats["refused_unknown_remote"] == 1
    assert a.channels == {}


def test_remote_may_refuse():
    net = Net()
    a = net.join("a")
    net.join("b", accept=lambda key: False)
    cid = a.open_channel(net.key("b"))
    net.pump()
    assert net.take("a") == [ChannelRefused(cid, net.key("b"), "refused")]
    assert net.take("b") == []
    assert all(s is None for _, link in net.clients.values() for s in link.slots)


def test_257th_channel_to_one_client_is_refused_and_others_unaffected():
    net = Net()
    b = net.join("b")
    openers = [net.join(f"a{i}") for i in range(2)]
    for i in range(256):
        openers[i % 2].open_channel(net.key("b"))
    net.pump()
    assert len(b.channels) == 256
    late = net.join("late")
    cid = late.open_channel(net.key("b"))
    net.pump()
    assert net.take("late") == [ChannelRefused(cid, net.key("b"), "refused")]
    assert net.switch.stats["refused_channels_full"] == 1
    # the 256 channels still carry messages
    got = net.take("a0")
    ready = [e for e in got if type(e) is ChannelReady]
    assert len(ready) == 128
    openers[0].send(ready[0].channel_id, b"still here")
    net.pump()
    assert [e.data for e in net.take("b") if type(e) is Message] == [b"still here"]


def test_link_loss_closes_the_channels_of_its_peers():
    net = Net()
    net.join("a")
    net.join("b")
    ca, cb = open_pair(net, "a", "b")
    net.switch.link_lost(net.clients["a"][1])
    net.pump()
    assert net.take("b") == [ChannelEnded(cb, net.key("a"), "remote_closed")]
    assert net.clients["b"][0].channels == {}


def test_crossing_opens_with_one_id_refuse_each_other():
    net = Net()
    a = net.join("a")
    net.join("c")
    a._cursor = 255  # make a pick the ID the server picks for c's channel to a
    ca = a.open_channel(net.key("c"))
    cc = net.clients["c"][0].open_channel(net.key("a"))
    assert ca == 255
    # deliver both OpenChannels before either side answers
    link_a, link_c = net.clients["a"][1], net.clients["c"][1]
    net.switch.feed(link_c, net.clients["c"][0].data_to_send())
    net.switch.feed(link_a, a.data_to_send())
    net.pump()
    assert ChannelRefused(ca, net.key("c"), "refused") in net.take("a")
    assert net.take("c") == [ChannelRefused(cc, net.key("a"), "refused")]
    assert all(s is None for _, link in net.clients.values() for s in link.slots)


def test_send_on_a_tampered_channel_ends_only_that_channel():
    net = Net()
    a = net.join("a")
    net.join("b")
    ca, cb = open_pair(net, "a", "b")
    ca2, cb2 = open_pair(net, "a", "b")
    net.switch.feed(net.clients["a"][1], f.Send(ca, bytes(40)).encode())  # garbage ciphertext
    net.pump()
    assert net.take("b") == [ChannelEnded(cb, net.key("a"), "decrypt")]
    assert net.take("a") == [ChannelEnded(ca, net.key("b"), "remote_closed")]
    a.send(ca2, b"fine")
    net.pump()
    assert net.take("b") == [Message(cb2, b"fine")]


@pytest.mark.parametrize("wire,reason", [
    (b"\x09\x00\x01\x00", "unknown_type"),
    (b"\x04\x00\x14\x00\x00\x20" + bytes(17), "send_size"),
    (b"\x00\x00\x10" + bytes(16), "bad_length"),
])
def test_malformed_frames_raise_for_that_link_only(wire, reason):
    net = Net()
    net.join("a")
    net.join("b")
    ca, cb = open_pair(net, "a", "b")
    with pytest.raises(ProtocolError) as exc:
        net.switch.feed(net.clients["b"][1], wire)
    assert exc.value.reason == reason
    net.switch.link_lost(net.clients["b"][1])
    net.pump()
    assert net.take("a") == [ChannelEnded(ca, net.key("b"), "remote_closed")]


def test_reusing_an_open_channel_id_is_a_protocol_error():
    net = Net()
    net.join("a")
    net.join("b")
    ca, _ = open_pair(net, "a", "b")
    with pytest.raises(ProtocolError) as exc:
        net.switch.feed(net.clients["a"][1], f.OpenChannel(ca, net.key("b"), bytes(49)).encode())
    assert exc.value.reason == "channel_in_use"


def test_close_timeout_sends_channel_closed_itself():
    net = Net()
    a = net.join("a")
    net.join("b")
    ca, cb = open_pair(net, "a", "b")
    a.close_channel(ca)
    close_frame = a.data_to_send()  # lost: never reaches the switch
    assert close_frame == f.CloseChannel(ca).encode()
    assert a.close_timed_out(ca) == ChannelEnded(ca, net.key("b"), "close_timeout")
    net.pump()
    assert net.take("b") == [ChannelEnded(cb, net.key("a"), "remote_closed")]


def test_channel_to_self_through_one_link():
    net = Net()
    a = net.join("a")
    ca = a.open_channel(net.key("a"))
    net.pump()
    got = net.take("a")
    incoming = [e for e in got if type(e) is IncomingChannel][0]
    assert ChannelReady(ca, net.key("a")) in got
    a.send(ca, b"me")
    net.pump()
    assert net.take("a") == [Message(incoming.channel_id, b"me")]


def test_frames_split_anywhere_are_forwarded_whole():
    net = Net()
    a = net.join("a")
    net.join("b")
    ca, cb = open_pair(net, "a", "b")
    for i in range(3):
        a.send(ca, bytes([i]) * 1000)
    wire = a.data_to_send()
    for i in range(0, len(wire), 7):
        net.switch.feed(net.clients["a"][1], wire[i:i + 7])
    net.pump()
    assert [e.data for e in net.take("b")] == [bytes([i]) * 1000 for i in range(3)]


def test_closing_while_the_open_is_in_flight():
    net = Net()
    a = net.join("a")
    net.join("b")
    cid = a.open_channel(net.key("b"))
    a.close_channel(cid)  # before any answer: OpenChannel and CloseChannel leave together
    net.pump()
    assert net.take("a") == [ChannelEnded(cid, net.key("b"), "closed")]
    got = net.take("b")
    assert [type(e) for e in got] == [IncomingChannel, ChannelEnded]
    assert all(s is None for _, link in net.clients.values() for s in link.slots)


def test_channel_opened_crossing_a_close_is_dropped_not_fatal():
    net = Net()
    a = net.join("a")
    b = net.join("b")
    link_a, link_b = net.clients["a"][1], net.clients["b"][1]
    cid = a.open_channel(net.key("b"))
    net.switch.feed(link_a, a.data_to_send())
    net.events["b"] += b.receive_data(bytes(link_b.outbox))  # b accepts: its ChannelOpened is in flight
    link_b.outbox.clear()
    a.close_channel(cid)
    net.switch.feed(link_a, a.data_to_send())  # the switch sees the close first
    net.switch.feed(link_b, b.data_to_send())  # then b's ChannelOpened: dropped, b's link lives
    assert net.switch.stats["dropped_closing"] == 1
    net.switch.take_dirty()
    net.events["b"] += b.receive_data(bytes(link_b.outbox))
    link_b.outbox.clear()
    net.pump()
    assert net.take("a") == [ChannelEnded(cid, net.key("b"), "closed")]
    got = net.take("b")
    assert [type(e) for e in got] == [IncomingChannel, ChannelEnded] and got[1].reason == "remote_closed"
    assert all(s is None for _, link in net.clients.values() for s in link.slots)
