"""A small file inside its offer message between burrow peers (apps/inline.py), with real processes and servers."""

import asyncio
import base64
import json
import os
import subprocess
import sys
import time

import pytest

from burrow.client.apps.transfer_versions import INLINE_MAX, dilated_sender_versions
from burrow.client.wormhole import Wormhole
from harness.wormhole_servers import WORMHOLE

pytestmark = pytest.mark.timeout(120)

INLINE = "inside the wormhole's encrypted messages"


def _common(servers) -> list[str]:
    return ["--relay-url", servers.relay_url, "--transit-helper", servers.transit_helper, "--hide-progress"]


def _burrow(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "burrow.client.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _pair(send: list[str], receive: list[str], cwd):
    s = subprocess.Popen(send, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    r = subprocess.Popen(receive, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    rout, rerr = r.communicate(timeout=90)
    sout, serr = s.communicate(timeout=90)
    return s.returncode, serr, r.returncode, rout + rerr


@pytest.mark.parametrize("size", [0, 1000, INLINE_MAX])
def test_a_small_file_between_burrow_peers_travels_inside_its_offer(wormhole_servers, tmp_path, size):
    src = tmp_path / "note.bin"
    src.write_bytes(os.urandom(size))
    got = tmp_path / "got.bin"
    code = f"{7100 + size % 97}-purple-sausages"
    me = [sys.executable, "-m", "burrow.client.cli"]
    sc, serr, rc, rerr = _pair([*me, "send", *_common(wormhole_servers), "--code", code, str(src)],
                               [*me, "receive", *_common(wormhole_servers), "--accept-file", "--sha256", "-o",
                                str(got), code], tmp_path)
    assert sc == 0 and rc == 0, (serr, rerr)
    assert INLINE in serr
    assert got.read_bytes() == src.read_bytes()
    assert f"Received file written to {got}" in rerr
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".burrow-part")]


def test_a_file_over_the_limit_takes_the_usual_way(wormhole_servers, tmp_path):
    src = tmp_path / "bigger.bin"
    src.write_bytes(os.urandom(INLINE_MAX + 1))
    got = tmp_path / "got.bin"
    me = [sys.executable, "-m", "burrow.client.cli"]
    sc, serr, rc, rerr = _pair([*me, "send", *_common(wormhole_servers), "--code", "7201-purple-sausages", str(src)],
                               [*me, "receive", *_common(wormhole_servers), "--accept-file", "-o", str(got),
                                "7201-purple-sausages"], tmp_path)
    assert sc == 0 and rc == 0, (serr, rerr)
    assert INLINE not in serr
    assert got.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("sender", ["burrow", "magic-wormhole"])
def test_magic_wormhole_peers_get_the_usual_transfer(wormhole_servers, tmp_path, sender):
    src = tmp_path / "small.txt"
    src.write_bytes(os.urandom(700))
    got = tmp_path / "got.txt"
    code = "7301-purple-sausages" if sender == "burrow" else "7302-purple-sausages"
    relay = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", wormhole_servers.transit_helper]
    me = [sys.executable, "-m", "burrow.client.cli"]
    if sender == "burrow":
        send = [*me, "send", *_common(wormhole_servers), "--code", code, str(src)]
        receive = [WORMHOLE, *relay, "receive", "--hide-progress", "--accept-file", "-o", str(got), code]
    else:
        send = [WORMHOLE, *relay, "send", "--hide-progress", "--code", code, str(src)]
        receive = [*me, "receive", *_common(wormhole_servers), "--accept-file", "-o", str(got), code]
    sc, serr, rc, rerr = _pair(send, receive, tmp_path)
    assert sc == 0 and rc == 0, (serr, rerr)
    assert INLINE not in serr
    assert got.read_bytes() == src.read_bytes()


def test_an_existing_target_is_refused_and_kept(wormhole_servers, tmp_path):
    src = tmp_path / "small.txt"
    src.write_bytes(b"new contents")
    got = tmp_path / "got.txt"
    got.write_bytes(b"old contents")
    me = [sys.executable, "-m", "burrow.client.cli"]
    sc, serr, rc, rerr = _pair([*me, "send", *_common(wormhole_servers), "--code", "7401-purple-sausages", str(src)],
                               [*me, "receive", *_common(wormhole_servers), "--accept-file", "-o", str(got),
                                "7401-purple-sausages"], tmp_path)
    assert rc == 5 and sc == 5, (serr, rerr)  # not a terminal: an existing file is never overwritten
    assert "transfer rejected" in serr
    assert got.read_bytes() == b"old contents"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".burrow-part")]


async def _crafted_sender(servers, code: str, message: dict) -> dict:
    """A sender that says it has a small file, then sends `message` as its file; returns the receiver's reply."""
    w = Wormhole(servers.relay_url, dilation=True, app_versions=dilated_sender_versions(1, inline=5))
    try:
        await w.open()
        w.set_code(code)
        await w.get_verifier()
        w.send_message(json.dumps(message).encode())
        return json.loads(await asyncio.wait_for(w.get_message(), 60))
    finally:
        await w.close()


@pytest.mark.parametrize("case,message", [
    ("not base64", {"burrow-file": {"filename": "x.txt", "filesize": 5, "data": "!!not base64!!"}}),
    ("size differs", {"burrow-file": {"filename": "x.txt", "filesize": 9, "data": base64.b64encode(b"hello").decode()}}),
    ("over the limit", {"burrow-file": {"filename": "x.txt", "filesize": INLINE_MAX + 1,
                                        "data": base64.b64encode(bytes(INLINE_MAX + 1)).decode()}}),
    ("no name", {"burrow-file": {"filesize": 5, "data": base64.b64encode(b"hello").decode()}}),
])
def test_a_malformed_file_message_gets_a_clear_error_and_writes_nothing(wormhole_servers, tmp_path, case, message):
    code = f"{7500 + len(case)}-purple-sausages"
    r = _burrow("receive", *_common(wormhole_servers), "--accept-file", code, cwd=tmp_path)
    reply = asyncio.run(_crafted_sender(wormhole_servers, code, message))
    _, rerr = r.communicate(timeout=60)
    assert r.returncode == 1, rerr
    assert "malformed file message" in reply["error"] or "at most" in reply["error"], reply
    assert "malformed file message" in rerr or "at most" in rerr
    assert list(tmp_path.iterdir()) == []


def test_a_receiver_waiting_for_its_sender_loads_dilation_meanwhile(wormhole_servers, tmp_path):
    """With the code typed in advance and no sender yet, the receiver loads Dilation while it waits (for a
    burrow sender's larger file); a text then arrives as usual."""
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: print('dilation loaded:', 'burrow.client.dilation.aio' in sys.modules))\n"
             "from burrow.client.cli import main\n"
             "main(sys.argv[1:])\n")
    r = subprocess.Popen([sys.executable, "-c", probe, "receive", *_common(wormhole_servers), "7601-purple-sausages"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    time.sleep(2.0)  # the receiver waits for a sender that is not there yet
    s = _burrow("send", *_common(wormhole_servers), "--code", "7601-purple-sausages", "--text", "hi")
    rout, rerr = r.communicate(timeout=60)
    s.communicate(timeout=60)
    assert r.returncode == 0 and s.returncode == 0, rerr
    assert "hi" in rout and "dilation loaded: True" in rout
