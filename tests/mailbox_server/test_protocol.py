"""Sans-IO protocol tests with literal JSON frames, pinned against the reference server's behaviour."""

from __future__ import annotations

import json

import pytest

from burrow.mailbox_server.limits import Limits

ACK_B = {"type": "ack", "id": "b"}


def test_welcome_carries_operator_keys_and_your_address(make):
    h = make(welcome={"motd": "hello", "current_cli_version": "0.24.0", "error": "go away"})
    _, out = h.connect("a")
    assert out == [{"type": "welcome", "welcome": {"motd": "hello", "current_cli_version": "0.24.0",
                                                    "error": "go away",
                                                    "your-address": {"port": 1234, "ipv4": "127.0.0.1"}}}]


def test_ping_before_bind_and_ack_comes_first(make):
    h = make()
    a, _ = h.connect("a")
    assert h.feed(a, '{"type": "ping", "ping": 7, "id": "x1"}') == {
        "a": [{"type": "ack", "id": "x1"}, {"type": "pong", "pong": 7}]}
    assert h.feed(a, '{"type": "ping"}') == {
        "a": [{"type": "ack", "id": None},
              {"type": "error", "error": "ping requires 'ping'", "orig": {"type": "ping"}}]}


@pytest.mark.parametrize("frame, error", [
    ('{"id": "q"}', "missing 'type'"),
])
def test_missing_type_gets_error_without_ack(make, frame, error):
    h = make()
    a, _ = h.connect("a")
    assert h.feed(a, frame) == {"a": [{"type": "error", "error": error, "orig": {"id": "q"}}]}
    assert "a" not in h.dropped


@pytest.mark.parametrize("frame, error", [
    ('{"type": "list"}', "must bind first"),
    ('{"type": "allocate"}', "must bind first"),
    ('{"type": "bogus"}', "must bind first"),
    ('{"type": "bind", "side": "s"}', "bind requires 'appid'"),
    ('{"type": "bind", "appid": "a"}', "bind requires 'side'"),
])
def test_errors_before_bind(make, frame, error):
    h = make()
    a, _ = h.connect("a")
    out = h.feed(a, frame)["a"]
    assert out[0]["type"] == "ack" and out[1]["type"] == "error" and out[1]["error"] == error
    assert "a" not in h.dropped


@pytest.mark.parametrize("frame, error", [
    ('{"type": "bind", "appid": "a", "side": "s"}', "already bound"),
    ('{"type": "bogus"}', "unknown type"),
    ('{"type": "submit-permissions"}', "unknown type"),
    ('{"type": "claim"}', "claim requires 'nameplate'"),
    ('{"type": "release"}', "release without nameplate must follow claim"),
    ('{"type": "open"}', "open requires 'mailbox'"),
    ('{"type": "add", "phase": "pake", "body": "00"}', "must open mailbox before adding"),
    ('{"type": "close"}', "close without mailbox must follow open"),
])
def test_errors_after_bind(make, frame, error):
    h = make()
    a = h.bound("a")
    out = h.feed(a, frame)["a"]
    assert [o["type"] for o in out] == ["ack", "error"]
    assert out[1]["error"] == error
    assert "a" not in h.dropped


def test_full_text_exchange_literal_trace(make):
    h = make()
    a, _ = h.connect("a")
    assert h.feed(a, '{"type": "bind", "appid": "app", "side": "sa", "client_version": ["python", "0.24.0"],'
                     ' "id": "0001"}') == {"a": [{"type": "ack", "id": "0001"}]}
    out = h.feed(a, '{"type": "allocate", "id": "0002"}')
    name = out["a"][1].get("nameplate", "")  # random among the free one-digit names
    assert out == {"a": [{"type": "ack", "id": "0002"}, {"type": "allocated", "nameplate": name}]}
    assert len(name) == 1 and name != "0"
    assert h.feed(a, json.dumps({"type": "claim", "nameplate": name, "id": "0003"})) == {
        "a": [{"type": "ack", "id": "0003"}, {"type": "claimed", "mailbox": "mb1"}]}
    assert h.feed(a, '{"type": "open", "mailbox": "mb1", "id": "0004"}') == {"a": [{"type": "ack", "id": "0004"}]}
    assert h.feed(a, '{"type": "add", "phase": "pake", "body": "aa", "id": "0005"}') == {
        "a": [{"type": "ack", "id": "0005"},
              {"type": "message", "side": "sa", "phase": "pake", "body": "aa", "server_rx": 1005.0, "id": "0005"}]}
    b, _ = h.connect("b")
    h.send(b, type="bind", appid="app", side="sb")
    assert h.send(b, type="list") == {"b": [{"type": "ack", "id": None},
                                            {"type": "nameplates", "nameplates": [{"id": name}]}]}
    assert h.send(b, type="claim", nameplate=name)["b"][1] == {"type": "claimed", "mailbox": "mb1"}
    # open replays the stored message, then B's add goes to both subscribers (sender included)
    assert h.send(b, type="open", mailbox="mb1") == {
        "b": [{"type": "ack", "id": None},
              {"type": "message", "side": "sa", "phase": "pake", "body": "aa", "server_rx": 1005.0, "id": "0005"}]}
    out = h.send(b, type="add", phase="pake", body="bb", id="b5")
    echo = {"type": "message", "side": "sb", "phase": "pake", "body": "bb", "server_rx": 1010.0, "id": "b5"}
    assert out == {"b": [{"type": "ack", "id": "b5"}, echo], "a": [echo]}
    assert h.send(a, type="release", nameplate=name) == {"a": [{"type": "ack", "id": None}, {"type": "released"}]}
    assert h.send(b, type="release") == {"b": [{"type": "ack", "id": None}, {"type": "released"}]}
    assert [u.event for u in h.usage] == ["nameplate"]
    assert h.usage[0].fields == {"app_id": "app", "started": 1002.0, "duration": 10.0, "waiting_time": 6.0,
                                 "mood": "happy"}
    assert h.send(a, type="close", mailbox="mb1", mood="happy") == {"a": [{"type": "ack", "id": None},
                                                                          {"type": "closed"}]}
    assert h.send(b, type="close", mood="happy")["b"][1] == {"type": "closed"}
    assert h.usage[1].event == "mailbox"
    assert h.usage[1].fields == {"app_id": "app", "started": 1002.0, "duration": 12.0, "waiting_time": 6.0,
                                 "mood": "happy", "for_nameplate": True, "sides": 2, "messages": 2, "bytes": 4}
    assert h.counts()[:2] == (0, 0)


def test_once_per_connection_rules_and_check_order(make):
    h = make()
    a = h.bound("a")
    h.send(a, type="allocate")
    assert h.send(a, type="allocate")["a"][1]["error"] == "you already allocated one, don't be greedy"
    h.send(a, type="claim", nameplate="5")
    # claim checks its field first, then the once-per-connection rule
    assert h.send(a, type="claim")["a"][1]["error"] == "claim requires 'nameplate'"
    assert h.send(a, type="claim", nameplate="6")["a"][1]["error"] == "only one claim per connection"
    assert h.send(a, type="release", nameplate="6")["a"][1]["error"] == "release and claim must use same nameplate"
    h.send(a, type="release")
    assert h.send(a, type="release", nameplate="5")["a"][1]["error"] == "only one release per connection"
    h.send(a, type="open", mailbox="m")
    # open checks the once rule first, then its field
    assert h.send(a, type="open")["a"][1]["error"] == "only one open per connection"
    assert h.send(a, type="add", body="00")["a"][1]["error"] == "missing 'phase'"
    assert h.send(a, type="add", phase="0")["a"][1]["error"] == "missing 'body'"
    assert h.send(a, type="close", mailbox="other")["a"][1]["error"] == "open and close must use same mailbox"
    h.send(a, type="close")
    assert h.send(a, type="close")["a"][1]["error"] == "only one close per connection"
    assert h.send(a, type="add", phase="1", body="00")["a"][1]["error"] == "must open mailbox before adding"
    assert "a" not in h.dropped


def test_third_side_is_crowded_and_poisons_the_mailbox(make):
    h = make()
    a, b, c = h.bound("a"), h.bound("b"), h.bound("c")
    h.send(a, type="claim", nameplate="4")
    h.send(b, type="claim", nameplate="4")
    assert h.send(c, type="claim", nameplate="4")["c"][1] == {
        "type": "error", "error": "crowded", "orig": {"type": "claim", "nameplate": "4"}}
    # the third side row stays: now even the legitimate sides see "crowded" on open
    assert h.send(a, type="open", mailbox="mb1")["a"][1]["error"] == "crowded"
    d = h.bound("d", side="a")
    assert h.send(d, type="open", mailbox="mb1")["d"][1]["error"] == "crowded"
    out = h.prune(h.now + 10_000, 660)
    assert [u.fields["mood"] for u in out] == ["crowded", "crowded"]


def test_reclaim_after_release_is_refused_but_reconnect_claim_is_idempotent(make):
    h = make()
    a, b = h.bound("a"), h.bound("b")
    h.send(a, type="claim", nameplate="8")
    h.send(b, type="claim", nameplate="8")
    h.send(a, type="release")
    a2 = h.bound("a2", side="a")
    assert h.send(a2, type="claim", nameplate="8")["a2"][1]["error"] == "reclaimed"
    b2 = h.bound("b2", side="b")  # b never released: a reconnecting b may claim again
    assert h.send(b2, type="claim", nameplate="8")["b2"][1] == {"type": "claimed", "mailbox": "mb1"}


def test_replay_on_reopen_is_in_server_rx_order_and_includes_duplicates(make):
    h = make()
    a = h.bound("a")
    h.send(a, type="open", mailbox="m")
    for phase in ("pake", "version", "0", "0"):
        h.send(a, type="add", phase=phase, body="ab")
    h.core.disconnect(a, h.now)
    a2 = h.bound("a2", side="a")
    out = h.send(a2, type="open", mailbox="m")["a2"]
    assert [(o["phase"], o["server_rx"]) for o in out[1:]] == [
        ("pake", 1003.0), ("version", 1004.0), ("0", 1005.0), ("0", 1006.0)]
    # the disconnected session is no longer subscribed
    assert list(h.send(a2, type="add", phase="1", body="cd")) == ["a2"]


def test_allocation_fills_one_digit_then_two_digits(make):
    h = make()
    names = []
    for i in range(12):
        s = h.bound(f"s{i}")
        names.append(h.send(s, type="allocate")[f"s{i}"][1]["nameplate"])
    assert sorted(names[:9], key=int) == [str(i) for i in range(1, 10)]
    assert all(10 <= int(n) <= 99 for n in names[9:])
    assert len(set(names)) == 12
    # "0" is never allocated but can be claimed
    z = h.bound("z")
    assert h.send(z, type="claim", nameplate="0")["z"][1]["type"] == "claimed"


def test_allocation_past_999_uses_random_large_ids(make):
    h = make(limits=Limits(max_mailboxes=0))
    for i in range(1, 1000):
        s = h.bound(f"s{i}")
        h.send(s, type="claim", nameplate=str(i))
    s = h.bound("big")
    name = h.send(s, type="allocate")["big"][1]["nameplate"]
    assert 1000 <= int(name) < 1_000_000


def test_disallow_list_returns_empty(make):
    h = make(allow_list=False)
    a = h.bound("a")
    h.send(a, type="claim", nameplate="1")
    assert h.send(a, type="list")["a"][1] == {"type": "nameplates", "nameplates": []}


@pytest.mark.parametrize("frame, error", [
    ("not json", "message is not a JSON object"),
    ("[1, 2]", "message is not a JSON object"),
    (b"\xff\xfe", "message is not a JSON object"),
])
def test_garbage_frames_get_an_error_then_close(make, frame, error):
    h = make()
    a, _ = h.connect("a")
    assert h.feed(a, frame) == {"a": [{"type": "error", "error": error, "orig": None}]}
    assert h.dropped == {"a": "protocol"}
    assert h.feed(a, '{"type": "ping", "ping": 1}') == {}  # terminal


@pytest.mark.parametrize("msg, error", [
    ({"type": "claim", "nameplate": 12}, "invalid nameplate: must be 1-40 ASCII digits"),
    ({"type": "claim", "nameplate": "abc"}, "invalid nameplate: must be 1-40 ASCII digits"),
    ({"type": "claim", "nameplate": "1" * 41}, "invalid nameplate: must be 1-40 ASCII digits"),
    ({"type": "claim", "nameplate": "12\n"}, "invalid nameplate: must be 1-40 ASCII digits"),
    ({"type": "claim", "nameplate": "\u0661"}, "invalid nameplate: must be 1-40 ASCII digits"),
    ({"type": "open", "mailbox": 5}, "open requires 'mailbox' to be a string"),
    ({"type": "add", "phase": 1, "body": "00"}, "add requires 'phase' and 'body' to be strings"),
])
def test_inputs_the_reference_disconnects_for(make, msg, error):
    h = make()
    a = h.bound("a")
    if msg["type"] == "add":
        h.send(a, type="open", mailbox="m")
    out = h.send(a, **msg)["a"]
    assert out == [{"type": "ack", "id": None}, {"type": "error", "error": error, "orig": msg}]
    assert h.dropped == {"a": "protocol"}


def test_close_moods_decide_the_mailbox_result(make):
    h = make()
    a, b = h.bound("a"), h.bound("b")
    h.send(a, type="open", mailbox="m")
    h.send(b, type="open", mailbox="m")
    h.send(a, type="close", mood="scary")
    h.send(b, type="close", mood="happy")
    (u,) = h.usage
    assert u.fields["mood"] == "scary" and u.fields["for_nameplate"] is False
    c = h.bound("c")
    h.send(c, type="close", mailbox="gone", mood="happy")  # unknown mailbox: created and closed, lonely
    assert h.usage[-1].fields["mood"] == "lonely"


def test_prune_keeps_subscribed_mailboxes_and_expires_idle_ones(make):
    h = make()
    a, b = h.bound("a"), h.bound("b")
    h.send(a, type="claim", nameplate="2")
    h.send(a, type="open", mailbox="mb1")
    h.send(b, type="claim", nameplate="3")  # b is not subscribed (claim does not subscribe)
    out = h.prune(h.now + 1000, 660)
    assert sorted((u.event, u.fields["mood"]) for u in out) == [("mailbox", "pruney"), ("nameplate", "pruney")]
    assert h.counts()[:2] == (1, 1)


def test_limits_give_clear_errors(make):
    h = make(limits=Limits(max_message_bytes=10, max_messages_per_mailbox=2, max_mailboxes_per_connection=1,
                              messages_per_second=0))
    a = h.bound("a")
    h.send(a, type="open", mailbox="m")
    assert h.send(a, type="add", phase="p", body="0" * 20)["a"][1]["error"] == "message too large"
    h.send(a, type="add", phase="p", body="00")
    h.send(a, type="add", phase="p", body="00")
    assert h.send(a, type="add", phase="p", body="00")["a"][1]["error"] == "mailbox is full"
    assert h.send(a, type="claim", nameplate="1")["a"][1]["error"] == "too many mailboxes on this connection"
    assert h.core.refusals == {"message_bytes": 1, "messages_per_mailbox": 1, "mailboxes_per_connection": 1}
    assert "a" not in h.dropped


def test_message_rate_limit_closes_the_flooding_connection_only(make):
    h = make(limits=Limits(messages_per_second=1, burst_messages=3))
    a, b = h.bound("a"), h.bound("b")
    for _ in range(3):  # the bucket holds 3 again one second after bind
        h.core.receive(a, '{"type": "ping", "ping": 1}', h.now)
    out = h.collect(h.core.receive(a, '{"type": "ping", "ping": 1}', h.now))
    assert out["a"][-1]["error"] == "too many messages, slow down"
    assert h.dropped == {"a": "limit"}
    assert h.send(b, type="ping", ping=2)["b"][1] == {"type": "pong", "pong": 2}


def test_server_full_refuses_new_mailboxes(make):
    h = make(limits=Limits(max_mailboxes=1))
    a, b = h.bound("a"), h.bound("b")
    h.send(a, type="claim", nameplate="1")
    assert h.send(b, type="claim", nameplate="2")["b"][1]["error"] == "server is full, try again later"
    assert h.send(b, type="open", mailbox="mb1")["b"] == [{"type": "ack", "id": None}]  # existing: fine


def test_bind_deadline(make):
    h = make()
    a, _ = h.connect("a")
    out = h.collect(h.core.bind_timed_out(a))
    assert out == {"a": [{"type": "error", "error": "no bind received in time", "orig": None}]}
    assert h.dropped == {"a": "timeout"}
    b = h.bound("b")
    assert h.core.bind_timed_out(b) == []


def test_apps_are_isolated(make):
    h = make()
    a = h.bound("a", appid="one")
    b = h.bound("b", appid="two")
    h.send(a, type="claim", nameplate="1")
    assert h.send(b, type="list")["b"][1]["nameplates"] == []
    h.send(a, type="open", mailbox="shared")
    h.send(b, type="open", mailbox="shared")
    assert list(h.send(a, type="add", phase="x", body="00")) == ["a"]


def test_byte_limits_per_mailbox_and_server(make):
    h = make(limits=Limits(max_mailbox_bytes=10, max_stored_bytes=15, messages_per_second=0))
    a, b = h.bound("a"), h.bound("b")
    h.send(a, type="open", mailbox="m1")
    h.send(a, type="add", phase="p", body="0" * 8)  # 9 bytes counted (phase + body)
    assert h.send(a, type="add", phase="p", body="00")["a"][1]["error"] == "mailbox is full"
    h.send(b, type="open", mailbox="m2")
    assert h.send(b, type="add", phase="p", body="0" * 8)["b"][1]["error"] == "server is full, try again later"
    h.send(a, type="close")  # frees m1's 8 stored body bytes
    assert h.counts()[2] == 0
    assert h.send(b, type="add", phase="p", body="0" * 8)["b"][1]["type"] == "message"
    assert h.core.refusals == {"mailbox_bytes": 1, "stored_bytes": 1}
