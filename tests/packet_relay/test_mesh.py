"""Three relay processes in a full mesh on 127.0.0.1: clients on different nodes reach each other
through ForwardPacket, a node that lists itself skips itself, a killed node heals on restart."""

from __future__ import annotations

import asyncio
import contextlib
import sys

import pytest

from burrow.packet_relay.tls import generate_self_signed
from harness.ports import free_port
from harness.processes import Process

from .mesh_util import Mesh, Node, drain, exchange, private_hosts_file

pytestmark = pytest.mark.timeout(180)


@contextlib.asynccontextmanager
async def started(*clients):
    try:
        for c in clients:
            await c.start()
        yield clients
    finally:
        for c in clients:
            await c.close()


async def test_derp_clients_on_different_nodes_exchange_packets_both_ways(tmp_path):
    with Mesh(tmp_path) as mesh:
        mesh.wait_meshed()
        n0, n1, n2 = mesh.nodes
        async with started(n0.client(), n1.client(websocket=True), n2.client()) as (a, b, c):
            await exchange(a, b, b"a->b over TCP, to a WebSocket client on another node")
            await exchange(b, a, b"b->a")
            await exchange(c, b, b"c->b")
            await exchange(b, c, b"b->c")
            await exchange(a, c, b"a->c")
            await exchange(c, a, b"c->a")
            # a burst goes through whole and in order once the route is known
            for i in range(200):
                await a.send(c.public_key, b"%d" % i)
            got = [(await c.recv(timeout=5))[1] for _ in range(200)]
            assert got == [b"%d" % i for i in range(200)]
        for node in mesh.nodes:
            assert node.metric("burrow_relay_mesh_peers_up") == 2     # itself listed, and skipped
            assert node.metric("burrow_relay_mesh_peers") == 2
        # the mesh families follow the metrics rules: one family per name, samples from the start
        from prometheus_client.parser import text_string_to_metric_families

        fams = list(text_string_to_metric_families(n1.metrics()))
        names = [f.name for f in fams]
        assert len(names) == len(set(names)) and all(f.samples for f in fams)
        assert {"burrow_relay_mesh_peers_up", "burrow_relay_mesh_peers", "burrow_relay_mesh_remote_keys",
                "burrow_relay_mesh_packets", "burrow_relay_mesh_forward_drops",
                "burrow_relay_mesh_senders_paused"} <= set(names)
        detail = n1.readyz().splitlines()
        assert detail[:2] == ["ready", "mesh: 2/2 peers up, 0 remote keys"]
        assert sorted(line.split()[1] for line in detail[2:]) == ["live", "live", "self"]
        assert f"{n1.url} self" in n1.readyz()
        assert n0.metric("burrow_relay_mesh_packets_total", 'direction="to_peer"') >= 202
        assert n2.metric("burrow_relay_mesh_packets_total", 'direction="from_peer"') >= 201


async def test_a_forwarded_packet_is_never_forwarded_again(tmp_path):
    """A key on node 1 that node 0 still believes is on node 1 after it left: node 1 drops the
    ForwardPacket (unknown_dest_on_fwd) instead of sending it on, so nothing loops."""
    with Mesh(tmp_path) as mesh:
        mesh.wait_meshed()
        n0, n1, _ = mesh.nodes
        async with started(n0.client(), n1.client()) as (a, b):
            await exchange(a, b, b"route known")
            before = n1.metric("burrow_relay_mesh_packets_total", 'direction="to_peer"')
            # raw ForwardPacket from a mesh-key holder to node 1 for a key nobody has
            from burrow.wire.derp import frames as f
            from burrow.wire.derp.handshake import ClientInfoJSON

            m = n1.client(reconnect=False)
            m.info = ClientInfoJSON(mesh_key=n1.mesh_key_file.read_text().strip())
            await m.start()
            try:
                m._link.write(f.ForwardPacket(a.public_key, b"\x07" * 32, b"lost").encode())
                m._link.write(f.ForwardPacket(a.public_key, b.public_key, b"delivered").encode())
                src, got = await b.recv(timeout=5)
                assert (src, got) == (a.public_key, b"delivered")
            finally:
                await m.close()
            assert n1.metric("burrow_relay_packets_dropped_total", 'protocol="derp",reason="unknown_dest_on_fwd"') == 1
            assert n1.metric("burrow_relay_mesh_packets_total", 'direction="to_peer"') == before


async def test_forwarded_and_local_packets_to_one_client_keep_their_order(tmp_path):
    """One read holding SendPackets (queued for b) and runs of ForwardPackets (written to b at once):
    b gets every packet in the order the relay read them, local ones queued earlier first."""
    from burrow.wire.derp import frames as f
    from burrow.wire.derp.handshake import ClientInfoJSON

    with Mesh(tmp_path, n=1) as mesh:
        (n0,) = mesh.nodes
        async with started(n0.client(), n0.client()) as (a, b):
            await exchange(a, b, b"b is known")
            m = n0.client(reconnect=False)  # a mesh-key holder may send both kinds of frame
            m.info = ClientInfoJSON(mesh_key=n0.mesh_key_file.read_text().strip())
            await m.start()
            try:
                frames, want = [], []
                for i in range(300):
                    if i % 7 < 3:  # runs of local packets between runs of forwarded ones
                        frames.append(f.SendPacket(b.public_key, b"local %d" % i).encode())
                        want.append((m.public_key, b"local %d" % i))
                    else:
                        frames.append(f.ForwardPacket(a.public_key, b.public_key, b"forwarded %d" % i).encode())
                        want.append((a.public_key, b"forwarded %d" % i))
                m._link.write(b"".join(frames))
                got = [await b.recv(timeout=5) for _ in want]
                assert got == want
            finally:
                await m.close()
        assert n0.metric("burrow_relay_mesh_packets_total", 'direction="from_peer"') == 171  # the forwarded ones


async def test_packets_of_every_size_cross_the_mesh_whole_and_in_order_beside_local_traffic(tmp_path):
    """a (node 0) -> mesh -> b (node 1) while c (node 1) sends to b too: every payload size arrives
    byte for byte, and each sender's packets in the order it sent them."""
    with Mesh(tmp_path, n=2) as mesh:
        mesh.wait_meshed()
        n0, n1 = mesh.nodes
        async with started(n0.client(), n1.client(), n1.client()) as (a, b, c):
            await exchange(a, b, b"route known")
            await exchange(c, b, b"local route known")
            sizes = [0, 1, 31, 32, 33, 1200, 1500, 16 * 1024 - 69, 16 * 1024, 65535, 65536] * 3
            sent = {a.public_key: [], c.public_key: []}
            for i, n in enumerate(sizes):
                for sender in (a, c):
                    payload = (b"%d:" % i + bytes([i]) * n)[:n] if n < 8 else b"%5d:" % i + bytes([i]) * (n - 6)
                    await sender.send(b.public_key, payload)
                    sent[sender.public_key].append(payload)
            got = {a.public_key: [], c.public_key: []}
            for _ in range(2 * len(sizes)):
                src, payload = await b.recv(timeout=10)
                got[src].append(payload)
            assert got == sent


async def test_a_killed_node_heals_and_traffic_resumes(tmp_path):
    with Mesh(tmp_path) as mesh:
        mesh.wait_meshed()
        n0, n1, n2 = mesh.nodes
        async with started(n0.client(), n2.client()) as (a, c):
            await exchange(a, c, b"before")
            n1.kill()
            # the others notice, forget node 1's keys, and keep serving each other
            for _ in range(200):
                if n0.metric("burrow_relay_mesh_peers_up") == 1 and n2.metric("burrow_relay_mesh_peers_up") == 1:
                    break
                await asyncio.sleep(0.1)
            assert n0.metric("burrow_relay_mesh_peers_up") == 1 and n2.metric("burrow_relay_mesh_peers_up") == 1
            await exchange(c, a, b"while node 1 is down")
            n1.start()
            await asyncio.to_thread(mesh.wait_meshed)
            async with started(n1.client()) as (b,):
                await exchange(a, b, b"to the restarted node")
                await exchange(b, c, b"from the restarted node")
                await drain(a)
                await exchange(c, a, b"after")


async def test_a_client_that_moved_is_reached_on_its_newest_node(tmp_path):
    """Key K connects to node 1, then again to node 2 while the node-1 connection stays open:
    packets from node 0 and from node 1 go to the node-2 connection (newest wins)."""
    with Mesh(tmp_path) as mesh:
        mesh.wait_meshed()
        n0, n1, n2 = mesh.nodes
        async with started(n0.client(), n1.client()) as (a, old):
            await exchange(a, old, b"to the first connection")
            async with started(n2.client(private_key=old.private_key)) as (new,):
                await exchange(a, new, b"from node 0 to the newest connection")
                async with started(n1.client()) as (d,):
                    await exchange(d, new, b"from node 1, where the old connection still is")
                    await drain(old)   # what went there before the routes converged
                    for i in range(20):
                        await a.send(new.public_key, b"a%d" % i)
                        await d.send(new.public_key, b"d%d" % i)
                    got = {(await new.recv(timeout=5))[1] for _ in range(40)}
                    assert got == {b"%s%d" % (p, i) for p in (b"a", b"d") for i in range(20)}
                assert old.packets.empty()


FLOOD = """
import asyncio, sys
from burrow.client.derp import DerpClient

async def main(sender_url, sink_url, ca):
    f = DerpClient(sender_url, ca_file=ca)
    g = DerpClient(sink_url, ca_file=ca, recv_queue=64)   # a receiver that keeps almost nothing
    await f.start()
    await g.start()
    while True:                     # until the mesh knows g
        await f.send(g.public_key, b"route?")
        try:
            await g.recv(timeout=0.1)
            break
        except TimeoutError:
            pass
    print("flooding", flush=True)
    junk = bytes(1200)
    for _ in range(100000):         # bounded: at most 100000 x 50 packets; the test kills it sooner
        for _ in range(50):
            f.send_nowait(g.public_key, junk)
        await f.drain()

asyncio.run(main(*sys.argv[1:]))
"""


async def test_a_flood_through_the_mesh_leaves_a_pair_on_other_nodes_unaffected(tmp_path):
    """A process floods from node 0 to a receiver on node 1 as fast as it can; meanwhile a pair on
    nodes 1 and 2 ping-pongs: every one of its round trips completes, nothing of it is lost."""
    with Mesh(tmp_path) as mesh:
        mesh.wait_meshed()
        n0, n1, n2 = mesh.nodes
        async with started(n1.client(), n2.client()) as (b, c):
            await exchange(b, c, b"pair route")
            await exchange(c, b, b"pair route back")
            with Process([sys.executable, "-c", FLOOD, n0.url, n1.url, n0.cert]) as flood:
                await asyncio.to_thread(flood.wait_line, "flooding", 60)
                at_start = n0.metric("burrow_relay_mesh_packets_total", 'direction="to_peer"')
                for i in range(50):
                    await b.send(c.public_key, b"ping %d" % i)
                    assert await c.recv(timeout=30) == (b.public_key, b"ping %d" % i)
                    await c.send(b.public_key, b"pong %d" % i)
                    assert await b.recv(timeout=30) == (c.public_key, b"pong %d" % i)
                flooded_meanwhile = n0.metric("burrow_relay_mesh_packets_total", 'direction="to_peer"') - at_start
                assert flood.alive()
        assert flooded_meanwhile > 1000        # the pair's round trips ran during the flood


async def test_peers_found_by_a_dns_name_that_resolves_to_every_node(tmp_path):
    """One name (a headless Service in Kubernetes) resolves to the three nodes; each node is told only
    `dns+https://relay-mesh:PORT`, finds the other two and itself (skipped) among the addresses."""
    addresses = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    hosts = private_hosts_file(tmp_path, "relay-mesh", addresses)
    cert, key = generate_self_signed(str(tmp_path / "tls"), ("relay-mesh", *addresses))
    mesh_key = tmp_path / "mesh.key"
    mesh_key.write_text("ab" * 32)
    port = free_port(host=addresses[0])
    nodes = [Node(tmp_path, f"node{i}", cert, key, mesh_key, host=a, port=port, hosts_file=hosts)
             for i, a in enumerate(addresses)]
    for node in nodes:
        node.mesh_with = f"dns+https://relay-mesh:{port}"
        node.extra = ["--mesh-resolve-interval", "1"]
    with Mesh(tmp_path, nodes=nodes) as mesh:
        mesh.wait_meshed()
        assert "mesh: 2/2 peers up" in nodes[0].readyz()
        assert f"https://127.0.0.2:{port} (relay-mesh) self" in nodes[0].readyz()
        async with started(nodes[0].client(), nodes[2].client()) as (a, c):
            await exchange(a, c, b"found by name")
            await exchange(c, a, b"and back")


async def iroh_exchange(a, b, data: bytes, attempts: int = 100):
    """Send a datagram from iroh client a to b until one arrives; returns the frame."""
    for _ in range(attempts):
        await a.send(b.endpoint_id, data, ecn=1)
        try:
            while True:
                got = await b.recv(timeout=0.1)
                if got.body == b"\x01" + data:
                    return got
        except TimeoutError:
            continue
    raise AssertionError(f"{data!r} never arrived")


async def test_iroh_endpoints_on_different_nodes_exchange_datagrams_both_ways(tmp_path):
    """iroh endpoints (Ed25519 ids) cross the mesh as burrow's ForwardIroh frames: single datagrams
    and batches, both ways, with the frame type, ECN and segment size unchanged; DERP traffic on the
    same links is unaffected."""
    import ssl

    from burrow.client.iroh.client import IrohRelayClient

    with Mesh(tmp_path) as mesh:
        mesh.wait_meshed()
        n0, n1, n2 = mesh.nodes
        ctx = ssl.create_default_context(cafile=n0.cert)
        a, b = IrohRelayClient(n0.url, ssl_context=ctx), IrohRelayClient(n2.url, ssl_context=ctx)
        await a.connect(10)
        await b.connect(10)
        try:
            got = await iroh_exchange(a, b, b"iroh a->b across nodes")
            assert (got.frame_type, got.peer) == (6, a.endpoint_id)
            got = await iroh_exchange(b, a, b"iroh b->a")
            assert got.peer == b.endpoint_id
            segments = bytes(range(256)) * 10
            await a.send_batch(b.endpoint_id, 1000, segments, ecn=2)
            got = await b.recv(10)
            while got.frame_type != 7:   # a late single datagram of the warm-up may come first
                got = await b.recv(10)
            assert (got.peer, got.body) == (a.endpoint_id, b"\x02" + (1000).to_bytes(2, "big") + segments)
            assert n2.metric("burrow_relay_mesh_remote_keys") == 1   # a's endpoint id, learned from node 0
            async with started(n1.client(), n2.client()) as (c, d):
                await exchange(c, d, b"derp beside iroh")
        finally:
            await a.close()
            await b.close()
