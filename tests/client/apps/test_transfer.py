"""File transfer v1 burrow <-> burrow in one process, through a real mailbox and transit relay."""

import asyncio
import hashlib
import os
import socket

import pytest

from burrow.client.apps.receive import ReceiveOptions, receive
from burrow.client.apps.transfer import discard_transit, early_transit, send_path, send_text
from burrow.client.errors import TransferError, TransferRejected
from burrow.client.nat import natpmp, portmap, ssdp
from burrow.client.nat.hints import NatOptions
from burrow.client.transit import aio
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


async def test_a_silent_gateway_holds_no_hints_back_once_the_key_exchange_took_its_wait(wormhole_servers, tmp_path,
                                                                                      monkeypatch):
    """Both sides listen and start the port-mapping lookup before the code is known (early_transit). The
    gateway stays silent (NAT-PMP and SSDP to a port that never answers) and the code comes only after
    EXTERNAL_WAIT: by then the lookups' wait is over, so neither side holds its hints back again, and the
    whole transfer ends before a single such wait could pass."""
    wait = 2.0
    monkeypatch.setattr(aio, "EXTERNAL_WAIT", wait)
    monkeypatch.setattr(portmap, "UPNP_SEARCH_TIMEOUT", 30)  # a search that outlasts the test
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        monkeypatch.setattr(portmap, "default_gateway", lambda: "127.0.0.1")
        monkeypatch.setattr(natpmp, "PORT", silent.getsockname()[1])
        monkeypatch.setattr(ssdp, "ADDRESS", silent.getsockname())
        src = tmp_path / "data.bin"
        src.write_bytes(os.urandom(256 * 1024))
        a = Wormhole(wormhole_servers.relay_url, transit_helper=wormhole_servers.transit_helper, nat=NatOptions())
        b = Wormhole(wormhole_servers.relay_url, transit_helper=wormhole_servers.transit_helper, nat=NatOptions())
        ea = asyncio.ensure_future(early_transit(a, "sender"))
        eb = asyncio.ensure_future(early_transit(b, "receiver"))
        try:
            await a.open()
            await b.open()
            a.allocate_code()
            code = await a.get_code()
            await asyncio.sleep(wait)  # the receiver's user types the code meanwhile
            b.set_code(code)
            ta, tb = await ea, await eb
            assert not ta._mapping.done() and not ta._mapper.committed  # the gateway is still being asked
            out = tmp_path / "out.bin"
            async with asyncio.timeout(wait):
                desc, got = await asyncio.gather(send_path(a, src, transit=ta),
                                                 receive(b, ReceiveOptions(output=out, transit=tb)))
            assert desc.startswith("direct") and sha(out) == sha(src) == got.sha256
        finally:
            await discard_transit(ea)
            await discard_transit(eb)
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
