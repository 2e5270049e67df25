"""Sans-IO session: two sessions joined by a tiny in-test mailbox that broadcasts adds (like the server)."""

import json

from wormhole import _key as wh_key

from burrow.client.session import (
    AppMessage,
    Closed,
    CodeReady,
    DilateMessage,
    Failed,
    KeyEstablished,
    Verified,
    WormholeSession,
)

APPID = "lothar.com/wormhole/text-or-file-xfer"


class Broadcast:
    """Delivers each session's `add` to every session as a `message`, and answers claim/close."""

    def __init__(self, *sessions):
        self.sessions = sessions
        self.log = []

    def pump(self):
        moved = True
        while moved:
            moved = False
            for s in self.sessions:
                for text in s.take_outgoing():
                    moved = True
                    msg = json.loads(text)
                    self.log.append((s.side, msg))
                    t = msg["type"]
                    if t == "claim":
                        s.receive(json.dumps({"type": "claimed", "mailbox": "mb"}))
                    elif t == "release":
                        s.receive(json.dumps({"type": "released"}))
                    elif t == "close":
                        s.receive(json.dumps({"type": "closed"}))
                    elif t == "add":
                        for peer in self.sessions:
                            peer.receive(json.dumps({"type": "message", "side": s.side, "phase": msg["phase"],
                                                     "body": msg["body"], "id": msg["id"]}))


def pair(code_a="3-purple-sausages", code_b="3-purple-sausages", **kw):
    a = WormholeSession(APPID, **kw)
    b = WormholeSession(APPID)
    for s in (a, b):
        s.connection_made()
    a.set_code(code_a)
    b.set_code(code_b)
    return a, b, Broadcast(a, b)


def test_key_agreement_and_verifier():
    a, b, net = pair()
    net.pump()
    ea, eb = a.take_events(), b.take_events()
    assert CodeReady("3-purple-sausages") in ea
    assert any(isinstance(e, KeyEstablished) for e in ea)
    va = [e for e in ea if isinstance(e, Verified)][0]
    vb = [e for e in eb if isinstance(e, Verified)][0]
    assert va.verifier == vb.verifier == a.verifier
    assert va.versions == {"app_versions": {}}


def test_version_message_decrypts_with_magic_wormhole_functions():
    a, b, net = pair()
    net.pump()
    [(side, add)] = [(s, m) for s, m in net.log if m["type"] == "add" and m["phase"] == "version" and s == a.side]
    key = wh_key.derive_phase_key(b.key, a.side, "version")
    assert json.loads(wh_key.decrypt_data(key, bytes.fromhex(add["body"]))) == {"app_versions": {}}


def test_pake_body_format():
    a, b, net = pair()
    net.pump()
    [add] = [m for s, m in net.log if m["type"] == "add" and m["phase"] == "pake" and s == a.side]
    body = json.loads(bytes.fromhex(add["body"]))
    assert list(body) == ["pake_v1"] and len(bytes.fromhex(body["pake_v1"])) == 33


def test_numbered_messages_in_order_and_dilate_stream_separate():
    a, b, net = pair(versions={"can-dilate": ["ged"], "app_versions": {"x": 1}})
    a.send(b"first")
    a.send_phase("dilate-1", b"d1")
    a.send_phase("dilate-0", b"d0")
    a.send(b"second")
    a.send_phase("weird", b"ignored")
    net.pump()
    eb = b.take_events()
    assert [e.plaintext for e in eb if isinstance(e, AppMessage)] == [b"first", b"second"]
    assert [(e.phase, e.plaintext) for e in eb if isinstance(e, DilateMessage)] == [("dilate-0", b"d0"),
                                                                                     ("dilate-1", b"d1")]
    assert b.peer_versions == {"can-dilate": ["ged"], "app_versions": {"x": 1}}


def test_derive_key_matches_magic_wormhole():
    a, b, net = pair()
    net.pump()
    purpose = APPID + "/transit-key"
    assert a.derive_key(purpose, 32) == b.derive_key(purpose, 32) == wh_key.derive_key(a.key, purpose.encode())


def test_wrong_code_is_scary_on_both_sides():
    a, b, net = pair("3-purple-sausages", "3-purple-sausage")
    net.pump()
    for s in (a, b):
        ev = s.take_events()
        assert any(isinstance(e, Failed) and "wrong code" in str(e.error) for e in ev)
        assert s.mood == "scary"
        assert Closed("scary") in ev
    closes = [m for _, m in net.log if m["type"] == "close"]
    assert {c["mood"] for c in closes} == {"scary"}


def test_close_moods():
    a, b, net = pair()
    net.pump()
    a.close()
    net.pump()
    assert a.mood == "happy"
    lonely = WormholeSession(APPID)
    lonely.connection_made()
    lonely.set_code("8-a-b")
    net2 = Broadcast(lonely)
    net2.pump()
    lonely.close()
    net2.pump()
    assert lonely.mood == "lonely" and Closed("lonely") in lonely.take_events()


def test_welcome_error_is_unwelcome():
    s = WormholeSession(APPID)
    s.connection_made()
    s.receive(json.dumps({"type": "welcome", "welcome": {"error": "go away"}}))
    ev = s.take_events()
    assert any(isinstance(e, Failed) and "go away" in str(e.error) for e in ev)
    assert s.mood == "unwelcome"


def test_server_error_is_errory():
    s = WormholeSession(APPID)
    s.connection_made()
    s.receive(json.dumps({"type": "error", "error": "crowded", "orig": {}}))
    assert s.mood == "errory"
