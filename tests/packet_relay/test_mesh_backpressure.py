"""Two meshed relays in this process: when the peer stops reading the mesh link, the clients sending
into it are paused (TCP back-pressure, as derper's blocking mesh write) instead of their packets being
dropped, and everything flows again once the peer reads."""

from __future__ import annotations

import asyncio
import contextlib

from burrow.client.derp import DerpClient

from .derp_util import running_relay, two_node_mesh
from .mesh_util import exchange

PACKETS = 20000        # 24 MB of 1200-byte packets: far beyond the socket buffers and the link's backlog


async def wait_until(predicate, what: str, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.asynccontextmanager
async def sender_and_receiver_on_two_meshed_relays(tmp_path):
    """Relays a and b meshed in this process; s on a, r on b, the route from s to r known."""
    ports, common = two_node_mesh(tmp_path)
    async with running_relay(tmp_path / "a", https_port=ports[0], **common) as a, \
            running_relay(tmp_path / "b", https_port=ports[1], **common) as b:
        await wait_until(lambda: a.mesh.peers_up() == 1 and b.mesh.peers_up() == 1, "the mesh")
        ca = str(tmp_path / "tls/relay.crt")
        s = DerpClient(f"https://127.0.0.1:{ports[0]}", ca_file=ca)
        r = DerpClient(f"https://127.0.0.1:{ports[1]}", ca_file=ca, recv_queue=PACKETS + 10)
        await s.start()
        await r.start()
        try:
            await exchange(s, r, b"route")
            while not r.packets.empty():
                r.packets.get_nowait()
            yield a, b, s, r
        finally:
            with contextlib.suppress(Exception):
                await s.close()
                await r.close()


async def test_a_backed_up_mesh_link_pauses_its_senders_instead_of_dropping(tmp_path):
    async with sender_and_receiver_on_two_meshed_relays(tmp_path) as (a, b, s, r):
        # node B stops reading what node A's mesh link sends
        link_on_b = next(c for c in b.conns if getattr(c, "mesh", False) and c.key == a.public_key)
        link_on_b.transport.pause_reading()
        payload = bytes(1200)

        async def flood() -> None:
            for _ in range(0, PACKETS, 50):
                for _j in range(50):
                    s.send_nowait(r.public_key, payload)
                await s.drain()

        task = asyncio.create_task(flood())
        await wait_until(lambda: a.stats.mesh_held > 0, "the sender to be paused")
        await asyncio.sleep(0.5)            # the sender stays paused; nothing is dropped meanwhile
        assert not task.done()
        assert a.stats.drops[("mesh", "mesh_backlog")] == 0
        link_on_b.transport.resume_reading()
        await asyncio.wait_for(task, 60)
        # every packet arrives or is counted: the mesh dropped none (B may drop for its slow receiver)
        def accounted() -> int:
            return r.packets.qsize() + b.stats.drops[("derp", "queue_head")] + r.dropped

        await wait_until(lambda: accounted() >= PACKETS, "the packets")
        assert accounted() == PACKETS
        assert a.stats.drops[("mesh", "mesh_backlog")] == 0
        assert a.stats.drops[("mesh", "mesh_down")] == 0
        assert b.stats.mesh_in >= PACKETS


async def test_relays_behind_proxy_protocol_mesh_with_a_local_header(tmp_path):
    """With --proxy-protocol every connection must open with a PROXY header; mesh links send a LOCAL one."""
    ports, common = two_node_mesh(tmp_path)
    common["proxy_protocol"] = True
    async with running_relay(tmp_path / "a", https_port=ports[0], **common) as a, \
            running_relay(tmp_path / "b", https_port=ports[1], **common) as b:
        await wait_until(lambda: a.mesh.peers_up() == 1 and b.mesh.peers_up() == 1, "the mesh")
        assert all(link.synced for link in a.mesh.links.values() if link.state == "live")


async def test_a_slow_receiver_of_forwarded_packets_keeps_the_newest_in_order(tmp_path):
    """Forwarded packets for a client that stopped reading queue like local ones: the oldest are dropped
    and counted (queue_head), the rest arrive in order, ending with the last one sent."""
    async with sender_and_receiver_on_two_meshed_relays(tmp_path) as (a, b, s, r):
        r._link.writer.transport.pause_reading()  # r stops reading: node B's writes to it back up
        conn_on_b = b.registry.active(r.public_key)
        sent = 0
        while sent < PACKETS and not conn_on_b.paused:
            for _ in range(50):
                s.send_nowait(r.public_key, b"%08d" % sent + bytes(1192))
                sent += 1
            await s.drain()
            await asyncio.sleep(0)
        assert conn_on_b.paused
        for _ in range(200):  # these reach node B while r is behind: they queue, the oldest go
            s.send_nowait(r.public_key, b"%08d" % sent + bytes(1192))
            sent += 1
        await s.drain()
        await wait_until(lambda: b.stats.mesh_in >= sent, "node B to read them")
        r._link.writer.transport.resume_reading()

        def accounted() -> int:
            return r.packets.qsize() + b.stats.drops[("derp", "queue_head")] + r.dropped

        await wait_until(lambda: accounted() >= sent, "the packets")
        assert accounted() == sent and b.stats.drops[("derp", "queue_head")] > 0
        seq = [int(r.packets.get_nowait()[1][:8]) for _ in range(r.packets.qsize())]
        assert seq == sorted(seq) and seq[-1] == sent - 1
