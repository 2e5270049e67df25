"""Disco over real UDP sockets on 127.0.0.1 and a real burrow-relay (DERP): two endpoints that know only
each other's DERP and disco keys find the direct path through CallMeMaybe over the relay."""

import asyncio
import contextlib
import socket

import pytest

from burrow.client.nat.disco import DiscoEndpoint
from burrow.client.nat.disco_paths import DIRECT, RELAY
from burrow.wire import disco as d
from tests.packet_relay.derp_util import TIMEOUT, client, running_relay


@contextlib.asynccontextmanager
async def pair(tmp_path, **opts):
    """A relay, two DERP clients and their Disco endpoints on 127.0.0.1, each knowing only the other's keys."""
    async with running_relay(tmp_path) as server:
        derps = [await client(server), await client(server)]
        a, b = eps = [DiscoEndpoint(c, host="127.0.0.1", **opts) for c in derps]
        try:
            for ep in eps:
                await ep.start()
            peer_b = a.add_peer(derps[1].public_key, b.public_key)  # keys only: no endpoint of B
            peer_a = b.add_peer(derps[0].public_key, a.public_key)
            yield derps, a, b, peer_b, peer_a
        finally:
            for ep in eps:
                await ep.close()
            for c in derps:
                await c.close()


async def test_keys_only_peers_find_the_direct_path_through_call_me_maybe(tmp_path):
    async with pair(tmp_path) as (derps, a, b, peer_b, peer_a):
        assert a.path(peer_b).kind == RELAY
        await a.call(peer_b)
        path = await a.wait_direct(peer_b, TIMEOUT)
        assert (path.kind, path.endpoint) == (DIRECT, ("127.0.0.1", b.port))
        back = await b.wait_direct(peer_a, TIMEOUT)
        assert back.endpoint == ("127.0.0.1", a.port)
        assert peer_b.observed == ("127.0.0.1", a.port)  # B's pong says where it saw us
        assert a.stats["call_me_maybe_sent"] >= 1 and b.stats["call_me_maybe_received"] >= 1
        assert b.stats["call_me_maybe_sent"] >= 1      # B called back so both punch


async def test_without_a_call_the_peers_stay_on_the_relay(tmp_path):
    async with pair(tmp_path) as (derps, a, b, peer_b, peer_a):
        with pytest.raises(TimeoutError):
            await a.wait_direct(peer_b, 1.0)
        assert a.path(peer_b).kind == RELAY and a.stats["pings_sent"] == 0


async def test_junk_and_strangers_are_counted_and_harm_no_one(tmp_path):
    async with pair(tmp_path) as (derps, a, b, peer_b, peer_a):
        stranger = d.SharedBox(d.generate_private_key(), a.public_key)
        forged = bytearray(d.SharedBox(d.generate_private_key(), a.public_key).seal(d.Ping(bytes(12))))
        forged[6:38] = b.public_key  # claims to be B, box does not open
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for junk in (b"hello", d.MAGIC + bytes(100), stranger.seal(d.Ping(bytes(12))), bytes(forged),
                         peer_a.box.seal(d.CallMeMaybe((("127.0.0.1", 9),)))):
                s.sendto(junk, ("127.0.0.1", a.port))
        await derps[1].send(derps[0].public_key, b"not disco")
        await a.call(peer_b)
        await a.wait_direct(peer_b, TIMEOUT)
        await asyncio.sleep(0.1)
        assert a.stats["udp_not_disco"] == 1
        assert a.stats["unknown_sender"] == 2
        assert a.stats["bad_box"] == 1
        assert a.stats["call_me_maybe_over_udp"] == 1
        assert a.stats["derp_not_disco"] == 1
        assert ("127.0.0.1", 9) not in peer_b.selector.candidates()


async def test_the_path_falls_back_to_the_relay_when_pongs_stop(tmp_path):
    async with pair(tmp_path, reping_interval=0.5, ping_timeout=0.3, punch_for=1.0) as (derps, a, b, peer_b, _):
        await a.call(peer_b)
        await a.wait_direct(peer_b, TIMEOUT)
        await b.close()                          # B's socket is gone: A's re-pings go unanswered
        for _ in range(200):                     # bounded: the path lapses after 0.5 + 2 x 0.3 s without a pong
            if a.path(peer_b).kind == RELAY:
                break
            await asyncio.sleep(0.05)
        assert a.path(peer_b).kind == RELAY
        assert peer_b.selector.stats["lost_pings"] >= 1


async def test_datagrams_queued_on_the_socket_are_read_in_one_turn(tmp_path):
    # asyncio hands a datagram protocol one datagram per loop turn; the endpoint reads what else is queued, so
    # QUIC on the socket (client/dilation/quic_path.py) answers a batch with one transmit
    async with pair(tmp_path) as (derps, a, b, peer_b, peer_a):
        got = []
        a.on_datagram = lambda data, addr: got.append(data)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for i in range(10):  # loopback queues each one on a's socket before sendto returns
                s.sendto(b"not disco %d" % i, ("127.0.0.1", a.port))
            for _ in range(1000):  # bounded: until the first one is read
                if got:
                    break
                await asyncio.sleep(0)
        assert got == [b"not disco %d" % i for i in range(10)]
