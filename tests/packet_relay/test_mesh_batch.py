"""Two relays meshed in this process: between burrow relays a read's packets for one client cross the
mesh as ForwardBatch frames (the receiving relay announces it in its ServerInfo); a relay that does not
announce it gets ForwardPacket, as derper would; a broken batch closes only that mesh link."""

from __future__ import annotations

import contextlib

from burrow.client.derp import DerpClient
from burrow.packet_relay.mesh import MeshCollector
from burrow.wire.derp import frames as f
from burrow.wire.derp.handshake import ServerInfoJSON

from .derp_util import running_relay, two_node_mesh
from .test_mesh_backpressure import wait_until

PACKETS = 300


@contextlib.asynccontextmanager
async def two_relays(tmp_path, b_announces: bool = True):
    """Relays a and b meshed; b started first, so what it announces is set before a dials it."""
    ports, common = two_node_mesh(tmp_path)
    async with running_relay(tmp_path / "b", https_port=ports[1], **common) as b:
        if not b_announces:
            b.mesh_server_info = ServerInfoJSON()  # as an older burrow relay (or derper) answers
        async with running_relay(tmp_path / "a", https_port=ports[0], **common) as a:
            await wait_until(lambda: a.mesh.peers_up() == 1 and b.mesh.peers_up() == 1, "the mesh")
            ca = str(tmp_path / "tls/relay.crt")
            clients = [DerpClient(f"https://127.0.0.1:{p}", ca_file=ca, recv_queue=PACKETS + 10) for p in ports]
            for c in clients:
                await c.start()
            try:
                yield a, b, clients[0], clients[1]
            finally:
                for c in clients:
                    with contextlib.suppress(Exception):
                        await c.close()


async def burst(sender: DerpClient, receiver: DerpClient, tag: bytes) -> None:
    """PACKETS packets sent back to back arrive whole and in order (the route is learnt first)."""
    for _ in range(100):
        await sender.send(receiver.public_key, tag + b" route")
        try:
            await receiver.recv(timeout=0.2)
            break
        except TimeoutError:
            continue
    while not receiver.packets.empty():
        receiver.packets.get_nowait()
    payloads = [tag + b" %d " % i + bytes(i % 1400) for i in range(PACKETS)]
    for p in payloads:
        await sender.send(receiver.public_key, p)
    got = [(await receiver.recv(timeout=10))[1] for _ in range(PACKETS)]
    assert got == payloads


async def test_packets_cross_the_mesh_in_forward_batches_whole_and_in_order(tmp_path):
    async with two_relays(tmp_path) as (a, b, ca, cb):
        await burst(ca, cb, b"a->b")
        await burst(cb, ca, b"b->a")
        for node in (a, b):
            assert node.stats.mesh_batches_out > 0 and node.stats.mesh_batches_in > 0
            assert node.stats.mesh_in >= PACKETS and node.stats.mesh_out >= PACKETS
        batches = next(m for m in MeshCollector(a.mesh).collect() if m.name == "burrow_relay_mesh_batches")
        assert {s.labels["direction"]: s.value for s in batches.samples} == {
            "to_peer": a.stats.mesh_batches_out, "from_peer": a.stats.mesh_batches_in}


async def test_a_peer_that_does_not_announce_forward_batch_gets_forward_packet(tmp_path):
    async with two_relays(tmp_path, b_announces=False) as (a, b, ca, cb):
        await burst(ca, cb, b"a->b")   # to b: ForwardPacket
        await burst(cb, ca, b"b->a")   # to a, which announces: ForwardBatch
        assert a.stats.mesh_batches_out == 0 and b.stats.mesh_batches_in == 0 and b.stats.mesh_in >= PACKETS
        assert b.stats.mesh_batches_out > 0 and a.stats.mesh_batches_in > 0


async def test_an_inconsistent_forward_batch_closes_only_that_mesh_link(tmp_path):
    async with two_relays(tmp_path) as (a, b, ca, cb):
        await burst(ca, cb, b"before")
        link = next(iter(a.mesh.links.values()))
        if link.state != "live":
            link = next(lk for lk in a.mesh.links.values() if lk.state == "live")
        link.transport.write(f.header(f.FORWARD_BATCH, 36) + cb.public_key + (2).to_bytes(4, "big"))
        await wait_until(lambda: b.stats.errors, "the error counted")
        assert sum(b.stats.errors.values()) == 1
        await wait_until(lambda: a.mesh.peers_up() == 1, "the link redialled")
        await burst(ca, cb, b"after")  # clients untouched, the mesh heals
