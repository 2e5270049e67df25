"""File transfer v1 burrow <-> burrow in one process, through a real mailbox and transit relay."""

import asyncio
import hashlib
import os

import pytest

from burrow.client.apps.receive import ReceiveOptions, receive
from burrow.client.apps.transfer import send_path, send_text
from burrow.client.errors import TransferError, TransferRejected
from burrow.client.wormhole import Wormhole

pytestmark = pytest.mark.timeout(60)


async def pair(servers):
    a = Wormhole(servers.relay_url, transit_helper=servers.transit_helper)
    b = Wormhole(servers.relay_url, transit_helper=servers.transit_helper)
    await a.open()
    await b.open()
    a.allocate_code()
    b.set_code(await a.get_code())
    return a, b


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_text(wormhole_servers):
    a, b = await pair(wormhole_servers)
    _, got = await asyncio.gather(send_text(a, "héllo\nworld"), receive(b))
    assert got.offer.kind == "text" and got.offer.text == "héllo\nworld"
    await a.close()
    await b.close()


@pytest.mark.parametrize("no_listen", [False, True], ids=["direct", "relay"])
async def test_file(wormhole_servers, tmp_path, no_listen):
    src = tmp_path / "data.bin"
    src.write_bytes(os.urandom(3 * 1024 * 1024 + 7))
    a, b = await pair(wormhole_servers)
    seen = []
    out = tmp_path / "out" / "data.bin"
    desc, got = await asyncio.gather(
        send_path(a, src, no_listen=no_listen),
        receive(b, ReceiveOptions(output=out, no_listen=no_listen, on_connected=seen.append)))
    assert sha(out) == sha(src) == got.sha256
    assert desc.startswith("relay" if no_listen else "direct") and seen[0].split()[0] == desc.split()[0]
    assert not list((tmp_path / "out").glob("*.burrow-part"))
    await a.close()
    await b.close()


async def test_directory(wormhole_servers, tmp_path):
    src = tmp_path / "tree"
    (src / "a" / "b").mkdir(parents=True)
    (src / "empty").mkdir()
    (src / "a" / "x.txt").write_text("x")
    (src / "a" / "b" / "y.bin").write_bytes(os.urandom(200_000))
    a, b = await pair(wormhole_servers)
    dest = tmp_path / "got"
    await asyncio.gather(send_path(a, src), receive(b, ReceiveOptions(output=dest)))
    for rel in ("a/x.txt", "a/b/y.bin"):
        assert sha(dest / rel) == sha(src / rel)
    assert (dest / "empty").is_dir()
    await a.close()
    await b.close()


async def test_existing_file_is_not_overwritten_and_sender_told(wormhole_servers, tmp_path):
    src = tmp_path / "f.txt"
    src.write_text("new")
    out = tmp_path / "existing.txt"
    out.write_text("old")
    a, b = await pair(wormhole_servers)
    res = await asyncio.gather(send_path(a, src), receive(b, ReceiveOptions(output=out)), return_exceptions=True)
    assert isinstance(res[0], TransferError) and "rejected" in str(res[0])
    assert isinstance(res[1], TransferRejected)
    assert out.read_text() == "old"
    await a.close()
    await b.close()


async def test_insufficient_space_rejected(wormhole_servers, tmp_path):
    src = tmp_path / "f.bin"
    with open(src, "wb") as f:  # sparse: claims far more than any disk has free
        f.truncate(1 << 43)
    a, b = await pair(wormhole_servers)
    res = await asyncio.gather(send_path(a, src), receive(b, ReceiveOptions(output=tmp_path / "o")),
                               return_exceptions=True)
    assert isinstance(res[1], TransferRejected) and "free space" in str(res[1])
    assert isinstance(res[0], TransferError)
    await a.close()
    await b.close()
