"""burrow's Dilation against magic-wormhole 0.24's (its Python API in a subprocess) on 127.0.0.1.

The mailbox and transit relay are the reference servers unless BURROW_TEST_SERVERS=burrow.
burrow's dilation side is forced ("f"*16 / "0"*16) so both roles are covered deterministically.
"""

from __future__ import annotations

import asyncio

import pytest

from burrow.client.dilation.aio import dilate
from burrow.client.wormhole import Wormhole
from harness.dilation import CuttingProxy, Peer, send_blob, sink_blob

pytestmark = [pytest.mark.timeout(180), pytest.mark.interop]

LEADER, FOLLOWER = "f" * 16, "0" * 16


async def run_pair(wormhole_servers, *, side, listen, size, transit=None, peer_args=(), **kw):
    transit = transit or wormhole_servers.transit_helper
    peer = await Peer.start(wormhole_servers.relay_url, transit, "--listen", "up", "--open", f"down:{size}",
                            "--expect", "1", *([] if listen else ["--no-listen"]), *peer_args)
    try:
        code = (await peer.expect("code"))[1]
        w = Wormhole(wormhole_servers.relay_url, transit_helper=transit, dilation=True)
        await w.open()
        w.set_code(code)
        statuses = []
        d = await dilate(w, side=side, listen=listen, listen_addresses=["127.0.0.1"], on_status=statuses.append,
                         **kw)
        listener = d.listen("down")
        await asyncio.wait_for(d.when_connected(), 30)
        assert d.leader is (side == LEADER)

        async def receive():
            r, wr = await listener.accept()
            return await sink_blob(r, wr)

        async def send():
            r, wr = await d.open("up")  # subchannel opened by burrow, accepted by 0.24's listener_for
            assert wr.scid % 2 == (1 if d.leader else 0)
            return await send_blob(r, wr, size)

        (mine, answered), (n, digest) = await asyncio.wait_for(asyncio.gather(send(), receive()), 150)
        assert mine == answered  # 0.24 received exactly our bytes
        _, name, peer_sent, peer_sha = await peer.expect("sent")
        assert (n, digest) == (int(peer_sent), peer_sha)  # we received exactly 0.24's bytes
        received = await peer.expect("received")
        assert received[2:] == [str(size), mine]
        await peer.expect("done")
        paths = [s.path for s in statuses if s.state == "connected"]
        await d.close()
        await w.close(mood="happy")
        assert await peer.finish() == 0
        return d, paths, peer
    finally:
        if peer.proc.returncode is None:
            peer.proc.kill()
            await peer.proc.wait()


@pytest.mark.parametrize("side", [LEADER, FOLLOWER], ids=["burrow-leader", "burrow-follower"])
@pytest.mark.parametrize("listen", [True, False], ids=["direct", "relay-only"])
async def test_100mb_each_way_with_magic_wormhole_024(wormhole_servers, side, listen):
    _, paths, peer = await run_pair(wormhole_servers, side=side, listen=listen, size=100_000_000)
    assert paths and paths[0].startswith("direct" if listen else "relay")
    theirs = [line for line in peer.lines if line.startswith("status ConnectedPeer")]
    assert theirs, peer.lines
    if not listen:
        assert all("relay" in line for line in theirs)


@pytest.mark.slow
@pytest.mark.parametrize("side", [LEADER, FOLLOWER], ids=["burrow-leader", "burrow-follower"])
async def test_200mb_with_relay_cut_every_2s_against_magic_wormhole_024(wormhole_servers, side):
    proxy = CuttingProxy(wormhole_servers.transit_port, cut_after=2.0, max_rate=50e6)  # >= 4 s: >= 2 cuts
    await proxy.start()
    try:
        d, paths, _ = await run_pair(wormhole_servers, side=side, listen=False, size=200_000_000, transit=proxy.location,
                                     ping_interval=5.0, peer_args=("--ping-interval", "5"))
        assert proxy.cuts >= 1 and len(paths) >= 2  # the connection really broke and came back
        assert all(p.startswith("relay") for p in paths)
    finally:
        await proxy.stop()


@pytest.mark.parametrize("side", [LEADER, FOLLOWER], ids=["burrow-leader", "burrow-follower"])
async def test_magic_wormhole_024_ignores_our_derp_disco_hint(wormhole_servers, tmp_path, side):
    """burrow offers `derp-disco-v1` (it names a DERP relay); 0.24 skips the unknown hint and connects."""
    from burrow.client.nat.hints import NatOptions
    from tests.packet_relay.derp_util import ca, running_relay, url

    async with running_relay(tmp_path) as server:
        nat = NatOptions(portmap=False, derp_url=url(server), derp_ca_file=ca(server))
        d, paths, _ = await run_pair(wormhole_servers, side=side, listen=True, size=5_000_000, nat=nat)
        assert paths and paths[0].startswith("direct") and "quic" not in paths[0]
        assert d.counters["bad_connections"] == 0
        assert await d.disco_link() is not None  # the link was up, so the hint went out with our others
