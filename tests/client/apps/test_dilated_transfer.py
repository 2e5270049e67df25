"""Dilated File-Transfer between two burrow clients through a real mailbox and relay on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os

import pytest

from burrow.client.apps.dilated_transfer import (
    DATA,
    FILE_OFFER,
    TransferError,
    app_versions,
    encode,
    peer_transfer,
    read_message,
    receive_on,
    safe_relative,
    send_on,
)
from burrow.client.wormhole import Wormhole
from harness.dilation import CuttingProxy

pytestmark = pytest.mark.timeout(120)


def test_message_codec_and_versions():
    frame = encode(FILE_OFFER, {"filename": "a.txt", "timestamp": 1, "bytes": 3})
    assert frame[:4] == (len(frame) - 4).to_bytes(4, "big") and frame[4] == FILE_OFFER
    assert encode(DATA, b"xyz") == b"\x00\x00\x00\x04\x05xyz"
    v = app_versions("receive", "ask")
    assert v == {"transfer": {"mode": "receive", "features": ["core0"], "permission": "ask"}}
    assert peer_transfer({"app_versions": v}) == v["transfer"]
    assert peer_transfer({"app_versions": {}}) is None

    async def parse():
        r = asyncio.StreamReader()
        r.feed_data(frame + encode(DATA, b"xyz"))
        r.feed_eof()
        return [await read_message(r), await read_message(r), await read_message(r)]

    assert asyncio.run(parse()) == [(FILE_OFFER, {"filename": "a.txt", "timestamp": 1, "bytes": 3}),
                                    (DATA, b"xyz"), None]


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a/../../b", "", "a\\b"])
def test_unsafe_names_rejected(bad):
    with pytest.raises(TransferError):
        safe_relative(bad)


async def session(wormhole_servers, transit, src_paths, out_dir, *, listen=True, accept=None):
    s = Wormhole(wormhole_servers.relay_url, transit_helper=transit, dilation=True,
                 app_versions=app_versions("send"))
    r = Wormhole(wormhole_servers.relay_url, transit_helper=transit, dilation=True,
                 app_versions=app_versions("receive", "ask"))
    await s.open()
    await r.open()
    s.allocate_code()
    r.set_code(await s.get_code())
    statuses = []
    sent, got = await asyncio.gather(
        send_on(s, src_paths, listen=listen, on_status=statuses.append),
        receive_on(r, out_dir, listen=listen, accept=accept))
    await asyncio.gather(s.close(), r.close(), return_exceptions=True)
    return sent, got, statuses


async def test_many_files_and_a_directory_over_a_cut_relay_then_resume(wormhole_servers, tmp_path):
    src = tmp_path / "src"
    (src / "tree" / "sub").mkdir(parents=True)
    files = []
    for i in range(6):
        p = src / f"file{i}.bin"
        p.write_bytes(os.urandom(4_000_000 + i))
        files.append(p)
    (src / "tree" / "a.txt").write_bytes(b"hello")
    (src / "tree" / "sub" / "b.bin").write_bytes(os.urandom(3_000_000))
    out = tmp_path / "out"
    out.mkdir()
    proxy = CuttingProxy(wormhole_servers.transit_port, cut_after=1.0, max_rate=10e6)  # ~3 s: several cuts
    await proxy.start()
    try:
        sent, got, statuses = await session(wormhole_servers, proxy.location, [*files, src / "tree"], out, listen=False)
    finally:
        await proxy.stop()
    total = sum(p.stat().st_size for p in files) + 5 + 3_000_000
    assert sorted(sent.sent) == sorted(got.received)
    assert len(got.received) == 8
    assert sent.data_bytes == got.data_bytes == total  # nothing was sent twice at the app level
    for p in files:
        assert (out / p.name).read_bytes() == p.read_bytes()
    assert (out / "tree" / "sub" / "b.bin").read_bytes() == (src / "tree" / "sub" / "b.bin").read_bytes()
    assert not list(out.glob("*.part"))
    assert proxy.cuts >= 1

    # a second session with the same files only sends what is missing
    (out / files[0].name).unlink()
    sent2, got2, _ = await session(wormhole_servers, wormhole_servers.transit_helper, files, out)
    assert sent2.sent == [files[0].name]
    assert sorted(sent2.skipped) == sorted(p.name for p in files[1:])
    assert sent2.data_bytes == files[0].stat().st_size
    assert sorted(got2.skipped) == sorted(p.name for p in files[1:])


async def test_receiver_can_refuse(wormhole_servers, tmp_path):
    p = tmp_path / "secret.bin"
    p.write_bytes(b"x" * 1000)
    out = tmp_path / "out"
    out.mkdir()

    async def no(name, size, is_dir):
        return False

    sent, got, _ = await session(wormhole_servers, wormhole_servers.transit_helper, [p], out, accept=no)
    assert sent.rejected == ["secret.bin"] and got.rejected == ["secret.bin"] and sent.data_bytes == 0
    assert not (out / "secret.bin").exists()


async def test_cli_glue_send_dilated_and_receive(wormhole_servers, tmp_path):
    from argparse import Namespace

    from burrow.client.apps.dilated_transfer_cli import cmd_send_dilated, receive_dilated
    from burrow.client.apps.transfer_versions import RECEIVER_WORMHOLE_KWARGS, is_dilated_sender

    src = tmp_path / "report.pdf"
    src.write_bytes(os.urandom(2_000_000))
    out = tmp_path / "inbox"
    code = "7-guitarist-revenge"
    common = dict(relay_url=wormhole_servers.relay_url, transit_helper=wormhole_servers.transit_helper, no_listen=False,
                  hide_progress=True, appid="lothar.com/wormhole/text-or-file-xfer")
    send = asyncio.ensure_future(cmd_send_dilated(Namespace(**common, what=str(src), code=code, code_length=2)))
    r = Wormhole(wormhole_servers.relay_url, transit_helper=wormhole_servers.transit_helper, **RECEIVER_WORMHOLE_KWARGS)
    await r.open()
    r.set_code(code)
    await r.get_verifier()
    assert is_dilated_sender(r.peer_versions)
    rc = await receive_dilated(r, Namespace(**common, output_file=str(out), accept_file=True))
    await r.close()
    assert rc == 0 and await send == 0
    assert (out / "report.pdf").read_bytes() == src.read_bytes()
