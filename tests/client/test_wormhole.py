"""The asyncio Wormhole against a real mailbox server on 127.0.0.1."""

import asyncio

import pytest

from burrow.client.errors import ServerConnectionError, WrongCodeError
from burrow.client.wormhole import Wormhole

pytestmark = pytest.mark.timeout(60)


async def opened(servers, **kw):
    w = Wormhole(servers.relay_url, transit_helper=servers.transit_helper, **kw)
    await w.open()
    return w


async def test_allocate_exchange_and_close_happy(wormhole_servers):
    a, b = await opened(wormhole_servers), await opened(wormhole_servers)
    a.allocate_code(3)
    code = await a.get_code()
    assert len(code.split("-")) == 4
    b.set_code(code)
    va, vb = await asyncio.gather(a.get_verifier(), b.get_verifier())
    assert va == vb and len(va) == 32
    a.send_message(b"one")
    a.send_message(b"two")
    b.send_message(b"back")
    assert [await b.get_message(), await b.get_message(), await a.get_message()] == [b"one", b"two", b"back"]
    assert a.derive_key("x", 16) == b.derive_key("x", 16)
    assert await a.close() == "happy" and await b.close() == "happy"


async def test_wrong_code_fails_both_sides(wormhole_servers):
    a, b = await opened(wormhole_servers), await opened(wormhole_servers)
    a.allocate_code()
    code = await a.get_code()
    b.set_code(code.split("-")[0] + "-wrong-words")
    for w in (a, b):
        with pytest.raises(WrongCodeError):
            await w.get_verifier()
        with pytest.raises(WrongCodeError):
            await w.get_message()
        with pytest.raises(WrongCodeError):
            await w.close()


async def test_dilation_hooks(wormhole_servers):
    got = []
    a = await opened(wormhole_servers, versions_extra={"can-dilate": ["ged"], "dilation-abilities": [
        {"type": "direct-tcp-v1"}]})
    b = await opened(wormhole_servers, on_dilate_message=lambda p, m: got.append((p, m)))
    a.allocate_code()
    b.set_code(await a.get_code())
    peer = await b.get_peer_versions()
    assert peer["can-dilate"] == ["ged"] and peer["app_versions"] == {}
    assert b.peer_versions == peer
    a.send_phase("dilate-0", b"please")
    a.send_phase("dilate-1", b"hints")
    a.send_message(b"app")
    assert await b.get_message() == b"app"
    for _ in range(50):
        if len(got) == 2:
            break
        await asyncio.sleep(0.05)
    assert got == [("dilate-0", b"please"), ("dilate-1", b"hints")]
    assert a.side != b.side and len(a.side) == 10
    assert a.relay_url == wormhole_servers.relay_url and a.transit_helper == wormhole_servers.transit_helper
    await a.close()
    await b.close()


async def test_reconnect_replays_pending_messages(wormhole_servers):
    a, b = await opened(wormhole_servers), await opened(wormhole_servers)
    a.allocate_code()
    b.set_code(await a.get_code())
    await asyncio.gather(a.get_verifier(), b.get_verifier())
    await a._ws.close()  # drop a's connection: it must reconnect, rebind with its side and replay
    a.send_message(b"after the drop")
    assert await asyncio.wait_for(b.get_message(), 20) == b"after the drop"
    b.send_message(b"reply")
    assert await asyncio.wait_for(a.get_message(), 20) == b"reply"
    await a.close()
    await b.close()


async def test_first_connection_failure_is_fatal():
    w = Wormhole("ws://127.0.0.1:1/v1")
    with pytest.raises(ServerConnectionError):
        await w.open()
