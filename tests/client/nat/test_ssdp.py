"""SSDP discovery: client/nat/ssdp.py's M-SEARCH and answers, written out literally; portmap.ssdp_search on
real UDP sockets; and what a port-mapping lookup costs when no gateway answers (no UPnP library loaded, and a
classic Transit race that ends cancels it)."""

import asyncio
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from burrow.client.nat import portmap, ssdp
from burrow.client.nat.hints import NatOptions
from burrow.client.transit.aio import Transit

pytestmark = pytest.mark.timeout(60)

ANSWER = (b"HTTP/1.1 200 OK\r\nCACHE-CONTROL: max-age=120\r\nST: " + portmap.IGD.encode() + b"\r\n"
          b"USN: uuid:1::" + portmap.IGD.encode() + b"\r\nEXT:\r\nSERVER: Debian/12 UPnP/1.1 MiniUPnPd/2.3\r\n"
          b"LOCATION: http://192.168.1.1:5000/rootDesc.xml\r\n\r\n")


def test_search_request_is_uda_1_1_m_search():
    assert ssdp.search_request("ssdp:all", 2) == (
        b'M-SEARCH * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nMAN: "ssdp:discover"\r\nMX: 2\r\n'
        b"ST: ssdp:all\r\n\r\n")
    with pytest.raises(ValueError):
        ssdp.search_request("ssdp:all", 0)


def test_parse_answer_gives_the_location():
    assert ssdp.parse_answer(ANSWER, portmap.IGD) == "http://192.168.1.1:5000/rootDesc.xml"
    assert ssdp.parse_answer(ANSWER.replace(b"\r\n", b"\n"), portmap.IGD) == "http://192.168.1.1:5000/rootDesc.xml"


@pytest.mark.parametrize("bad", [
    ANSWER.replace(b"200 OK", b"404 Not Found"),
    ANSWER.replace(b"InternetGatewayDevice", b"MediaRenderer"),  # another device type
    ANSWER.replace(b"http://", b"file://"),
    ANSWER.replace(b"LOCATION", b"X-LOCATION"),
    b"NOTIFY * HTTP/1.1\r\n\r\n",
    b"",
    b"\xff\xfe\x00garbage",
])
def test_parse_answer_ignores_other_datagrams(bad):
    assert ssdp.parse_answer(bad, portmap.IGD) is None


def silent_udp_port() -> tuple[socket.socket, tuple[str, int]]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()


async def test_search_returns_the_gateways_that_answer():
    gateway, addr = silent_udp_port()
    gateway.setblocking(False)
    loop = asyncio.get_running_loop()

    async def answer() -> bytes:
        request, peer = await loop.sock_recvfrom(gateway, 2048)
        await loop.sock_sendto(gateway, b"HTTP/1.1 200 OK\r\nST: ssdp:all\r\nLOCATION: http://x/\r\n\r\n", peer)
        await loop.sock_sendto(gateway, ANSWER, peer)  # the wrong type first, then an IGD, then it again
        await loop.sock_sendto(gateway, ANSWER, peer)
        return request

    with gateway:
        responder = asyncio.ensure_future(answer())
        found = await portmap.ssdp_search(timeout=5, address=addr)
        assert found == ["http://192.168.1.1:5000/rootDesc.xml"]
        assert (await responder).startswith(b"M-SEARCH * HTTP/1.1\r\n")


async def test_search_without_an_answer_is_empty():
    silent, addr = silent_udp_port()
    with silent:
        assert await portmap.ssdp_search(timeout=0.3, address=addr) == []


def test_no_upnp_library_is_loaded_when_no_gateway_answers():
    """async-upnp-client imports aiohttp: a quarter of a CPU-second spent for nothing on most networks."""
    silent, addr = silent_udp_port()
    script = textwrap.dedent(f"""
        import asyncio, sys
        from burrow.client.nat import portmap, ssdp
        ssdp.ADDRESS = {addr!r}
        portmap.UPNP_SEARCH_TIMEOUT = 0.3
        assert asyncio.run(portmap.upnp_map("tcp", 40000)) is None
        print(sorted(m for m in sys.modules if m.startswith(("aiohttp", "async_upnp_client"))))
    """)
    with silent:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


async def test_a_lookup_still_searching_is_cancelled_when_the_race_is_over(monkeypatch):
    """Neither NAT-PMP (the 'gateway' stays silent) nor SSDP has an answer when the direct connection wins:
    the lookups end with the race, and no task is left running into the transfer."""
    silent, addr = silent_udp_port()
    monkeypatch.setattr(ssdp, "ADDRESS", addr)
    monkeypatch.setattr(portmap, "default_gateway", lambda: "127.0.0.1")  # nothing listens on 5351 here
    s, r = Transit("sender", nat=NatOptions()), Transit("receiver", nat=NatOptions())
    with silent:
        hs, hr = await s.get_hints(), await r.get_hints()
        s.add_peer_hints(hr)
        r.add_peer_hints(hs)
        key = os.urandom(32)
        s.set_key(key)
        r.set_key(key)
        ps, pr = await asyncio.gather(s.connect(20), r.connect(20))
        for _ in range(3):
            await asyncio.sleep(0)
        assert asyncio.all_tasks() == {asyncio.current_task()}
        await ps.close()
        await pr.close()
        await s.close()
        await r.close()
