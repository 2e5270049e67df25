"""Outbound frames: the templates for acks and messages write exactly what the JSON encoder writes."""

import json
import time

import pytest

from burrow.mailbox_server import messages as m

NOW = time.time()
TEXTS = ["", "a1b2c3d4", "pake", "0", "é☃", 'quote " back \\ slash', "tab\tnl\n\x00\x1f", "\U0001f600"]


def frames():
    for t in TEXTS:
        yield m.ack(t)
        yield m.message(t, "version", "ab" * 40, NOW, "deadbeef")
        yield m.message("side", t, t, NOW, t)
    for odd in [None, 7, 1.5, True, ["x"], {"k": "v"}]:
        yield m.ack(odd)
        yield m.message("side", "pake", "ab", NOW, odd)
    yield m.message("side", "pake", "ab", 1700000000, "id")  # an int time: not the template's float
    yield m.message("side", 3, "ab", NOW, "id")  # not a str: as the encoder writes it
    yield m.welcome({"motd": "hi"})
    yield m.error("must bind first", {"type": "open"})


@pytest.mark.parametrize("msg", list(frames()), ids=repr)
def test_every_frame_is_what_the_json_encoder_writes(msg):
    expect = m.to_json({**msg, "server_tx": NOW}).encode()
    assert m.encode(msg, NOW) == expect
    assert json.loads(expect)["server_tx"] == NOW


def test_acks_and_messages_do_not_go_through_the_dict_encoder(monkeypatch):
    def walked(msg):
        raise AssertionError(f"dict encoder used for {msg}")

    monkeypatch.setattr(m, "to_json", walked)
    assert m.encode(m.ack("a1"), 1.25) == b'{"type": "ack", "id": "a1", "server_tx": 1.25}'
    assert m.encode(m.message("s", "pake", "ab", 1.5, None), 2.0) == (
        b'{"type": "message", "side": "s", "phase": "pake", "body": "ab", "server_rx": 1.5, "id": null, '
        b'"server_tx": 2.0}')
