"""Sans-IO mailbox client: message formats, replay on reconnect, dedupe, release and close."""

import json

import pytest

from burrow.client.mailbox_protocol import (
    Allocated,
    ClientMessage,
    MailboxClient,
    MailboxClosed,
    MailboxProtocolError,
    PeerMessage,
    ServerErrorEvent,
    Welcome,
)


def out(m: MailboxClient) -> list[dict]:
    return [json.loads(t) for t in m.take_outgoing()]


def types(msgs):
    return [d["type"] for d in msgs]


def srv(mtype, **kw):
    return json.dumps({"type": mtype, "server_tx": 1.0, **kw})


def test_bind_format():
    m = MailboxClient("app", "abcdef0123", ("burrow", "0.1.0"))
    m.connection_made()
    [bind] = out(m)
    assert bind["type"] == "bind" and bind["appid"] == "app" and bind["side"] == "abcdef0123"
    assert bind["client_version"] == ["burrow", "0.1.0"]
    assert len(bind["id"]) == 4 and int(bind["id"], 16) >= 0


def test_client_message_roundtrip():
    msg = ClientMessage("add", {"phase": "0", "body": "00"}, "beef")
    assert json.loads(msg.encode()) == {"type": "add", "id": "beef", "phase": "0", "body": "00"}
    assert ClientMessage.decode(msg.encode()) == msg


def test_allocate_claim_open_add_flow():
    m = MailboxClient("app", "s1")
    m.connection_made()
    m.allocate()
    m.add("pake", b"\x01\x02")  # queued until the mailbox is known
    assert types(out(m)) == ["bind", "allocate"]
    m.receive(srv("welcome", welcome={"motd": "hi"}))
    m.receive(srv("allocated", nameplate="7"))
    assert out(m) and m.nameplate == "7"
    m.receive(srv("claimed", mailbox="mb1"))
    msgs = out(m)
    assert types(msgs) == ["open", "add"]
    assert msgs[0]["mailbox"] == "mb1" and msgs[1] == {**msgs[1], "phase": "pake", "body": "0102"}
    ev = m.take_events()
    assert Welcome({"motd": "hi"}) in ev and Allocated("7") in ev


def test_echo_dequeues_and_peer_message_releases_and_dedupes():
    m = MailboxClient("app", "me")
    m.connection_made()
    m.claim("5")
    m.receive(srv("claimed", mailbox="mb"))
    m.add("pake", b"x")
    out(m)
    m.receive(srv("message", side="me", phase="pake", body="78", id="1", server_rx=1))
    assert m.pending == {}
    m.receive(srv("message", side="them", phase="pake", body="79", id="2", server_rx=1))
    assert types(out(m)) == ["release"]
    m.receive(srv("message", side="them", phase="pake", body="79", id="2", server_rx=1))  # duplicate
    assert m.take_events() == [PeerMessage("them", "pake", b"y")]


def test_reconnect_replays_open_pending_adds_and_release():
    m = MailboxClient("app", "me")
    m.connection_made()
    m.claim("5")
    m.receive(srv("claimed", mailbox="mb"))
    m.add("0", b"a")
    m.add("1", b"b")
    m.receive(srv("message", side="me", phase="0", body="61"))
    m.receive(srv("message", side="them", phase="pake", body="00"))
    out(m)
    m.connection_lost()
    m.add("2", b"c")  # while offline: nothing is sent
    assert out(m) == []
    m.connection_made()
    msgs = out(m)
    assert types(msgs) == ["bind", "release", "open", "add", "add"]
    assert [d["phase"] for d in msgs if d["type"] == "add"] == ["1", "2"]
    assert msgs[2]["mailbox"] == "mb"


def test_reconnect_reclaims_unacknowledged_claim():
    m = MailboxClient("app", "me")
    m.connection_made()
    m.claim("9")
    out(m)
    m.connection_lost()
    m.connection_made()
    assert types(out(m)) == ["bind", "claim"]


def test_close_waits_for_closed_and_released():
    m = MailboxClient("app", "me")
    m.connection_made()
    m.claim("5")
    m.receive(srv("claimed", mailbox="mb"))
    out(m)
    m.close("happy")
    msgs = out(m)
    assert types(msgs) == ["release", "close"] and msgs[1]["mood"] == "happy"
    m.receive(srv("closed"))
    assert m.take_events() == []
    m.receive(srv("released"))
    assert m.take_events() == [MailboxClosed("happy")]


def test_close_is_replayed_after_reconnect():
    m = MailboxClient("app", "me")
    m.connection_made()
    m.claim("5")
    m.receive(srv("claimed", mailbox="mb"))
    m.close("scary")
    m.connection_lost()
    out(m)
    m.connection_made()
    msgs = out(m)
    assert msgs[-1]["type"] == "close" and msgs[-1]["mood"] == "scary"


def test_server_error_event():
    m = MailboxClient("app", "me")
    m.receive(srv("error", error="crowded", orig={"type": "open"}))
    assert m.take_events() == [ServerErrorEvent("crowded", {"type": "open"})]


def test_unknown_types_ignored():
    m = MailboxClient("app", "me")
    m.receive(srv("ack", id="abcd"))
    m.receive(srv("pong", pong=1))
    m.receive(srv("future-thing"))
    assert m.take_events() == []


@pytest.mark.parametrize("bad", ["not json", "[1,2]", '{"no": "type"}', '{"type": "message", "side": "x"}',
                                 '{"type": "message", "side": "x", "phase": "0", "body": "zz"}'])
def test_malformed_server_messages_raise(bad):
    with pytest.raises(MailboxProtocolError):
        MailboxClient("app", "me").receive(bad)
