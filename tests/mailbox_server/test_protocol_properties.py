"""Property: random JSON and garbage never crash the core or the store, and never reach another
client's mailbox; the honest pair still finishes its exchange."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burrow.mailbox_server.store import Store

from .vectors import Harness

TYPES = ["ping", "bind", "list", "allocate", "claim", "release", "open", "add", "close", "bogus"]
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                        st.text(max_size=12))
json_value = st.recursive(json_scalar, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
field_value = st.one_of(json_value, st.sampled_from(["1", "2", "42", "evil", "pake", "00ff"]))
message = st.fixed_dictionaries(
    {"type": st.sampled_from(TYPES)},
    optional={"appid": st.sampled_from(["app", "other"]) | field_value, "side": field_value,
              "nameplate": field_value, "mailbox": field_value, "phase": field_value, "body": field_value,
              "mood": field_value, "id": field_value, "ping": field_value, "client_version": field_value})
frame = st.one_of(message.map(json.dumps), json_value.map(json.dumps), st.binary(max_size=40),
                  st.text(max_size=40))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(st.tuples(st.integers(0, 2), frame), max_size=25))
def test_random_frames_never_crash_or_leak(tmp_path_factory, frames):
    store = Store(str(tmp_path_factory.mktemp("db") / "mb.sqlite"))
    h = Harness()
    # the honest pair uses nameplate 777 and its mailbox; the attackers pick from other names
    a, b = h.bound("a", side="side-a"), h.bound("b", side="side-b")
    h.send(a, type="claim", nameplate="777")
    mailbox = h.send(b, type="claim", nameplate="777")["b"][1]["mailbox"]
    h.send(a, type="open", mailbox=mailbox)
    h.send(b, type="open", mailbox=mailbox)
    attackers = [h.connect(f"x{i}")[0] for i in range(3)]
    received: dict[str, list] = {"a": [], "b": []}
    for who, payload in frames:
        got = h.feed(attackers[who], payload)
        changes = h.store.take_changes()
        if changes is not None:
            store.apply(changes)  # whatever an attacker sent, the batch must still commit
        for name in ("a", "b"):
            received[name] += got.get(name, [])
    assert received == {"a": [], "b": []}  # nothing an attacker did reached the honest pair
    h.send(a, type="add", phase="pake", body="aa")
    got = h.send(b, type="add", phase="pake", body="bb")
    assert [m["side"] for m in got["a"]] == ["side-b"]
    assert [(m["type"], m.get("side")) for m in got["b"]] == [("ack", None), ("message", "side-b")]
    changes = h.store.take_changes()
    if changes is not None:
        store.apply(changes)
    loaded = store.load()
    assert [m.side for m in loaded["app"].mailboxes[mailbox].messages] == ["side-a", "side-b"]
    store.close()
