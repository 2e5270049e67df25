"""The iroh path wired into the relay's life cycle: config flags, Restarting on stop, SIGHUP reloads."""

import asyncio

import aiohttp
import pytest
from nacl.signing import SigningKey

from burrow.client.iroh.client import IrohRelayDenied
from burrow.common.config import load_config
from burrow.packet_relay.config import RelayConfig
from burrow.packet_relay.iroh.service import IrohSettings
from burrow.packet_relay.server import RelayServer
from burrow.wire.iroh import frames as f

from ..derp_util import client as derp_client
from ..derp_util import relay_config
from .util import TIMEOUT, client, http_url, iroh_relay


def test_flags_reach_the_iroh_settings():
    cfg = load_config(RelayConfig, "relay", ["--no-iroh", "--iroh-ping-interval", "3", "--iroh-pong-timeout",
                                             "1.5", "--iroh-tokens-file", "/x", "--no-iroh-tls-auth"])
    assert IrohSettings.from_config(cfg) == IrohSettings(enabled=False, tokens_file="/x", ping_interval=3.0,
                                                         pong_timeout=1.5, handshake_timeout=cfg.handshake_timeout,
                                                         tls_auth=False)


async def test_graceful_stop_sends_restarting_to_iroh_and_derp(tmp_path):
    server = RelayServer(relay_config(tmp_path, restart_reconnect=1.5, restart_try_for=30.0),
                         http_ephemeral=True)
    await server.start()
    try:
        a = await client(server)
        d = await derp_client(server, reconnect=False)
    finally:
        await server.stop()
    assert await a.recv(TIMEOUT, f.Restarting) == f.Restarting(1500, 30000)
    await asyncio.wait_for(a.closed.wait(), TIMEOUT)
    await a.close()
    await d.close()


async def test_iroh_can_be_switched_off(tmp_path):
    async with iroh_relay(tmp_path, iroh=False) as server:
        async with aiohttp.ClientSession() as http:
            async with http.get(http_url(server) + "/ping") as r:
                assert r.status == 404
            async with http.get(http_url(server) + "/relay") as r:
                assert r.status == 404


async def test_sighup_applies_allow_list_by_endpoint_id_and_rereads_tokens(tmp_path):
    keep, drop = SigningKey.generate(), SigningKey.generate()
    allow = tmp_path / "allow.txt"
    allow.write_text(f"endpoint:{bytes(keep.verify_key).hex()}\nendpoint:{bytes(drop.verify_key).hex()}\n")
    tokens = tmp_path / "tokens"
    tokens.write_text("old\n")
    async with iroh_relay(tmp_path, allow_list=str(allow), iroh_tokens_file=str(tokens)) as server:
        a = await client(server, key=keep, token="old")
        b = await client(server, key=drop, token="old")
        allow.write_text(f"endpoint:{bytes(keep.verify_key).hex()}\n")
        tokens.write_text("new\n")
        server.reload()
        await asyncio.wait_for(b.closed.wait(), TIMEOUT)
        assert not a.closed.is_set()
        with pytest.raises(IrohRelayDenied, match="bearer token"):
            await client(server, key=keep, token="old")
        c = await client(server, key=keep, token="new")
        await a.close()
        await c.close()


async def test_mesh_watchers_see_iroh_endpoints_flagged_as_iroh(tmp_path):
    import ssl

    from burrow.wire.derp import frames as df
    from burrow.wire.derp.connection import ClientConnection, Connected
    from burrow.wire.derp.handshake import ClientInfoJSON, generate_private_key

    from ..derp_util import ca

    mesh = tmp_path / "mesh.key"
    mesh.write_text("ab" * 32)
    async with iroh_relay(tmp_path, mesh_key_file=str(mesh)) as server:
        early = await client(server)  # an iroh endpoint that is already there when the watch starts
        d = await derp_client(server)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", server.https_port, ssl=ssl.create_default_context(cafile=ca(server)),
            server_hostname="127.0.0.1")
        writer.write(b"GET /derp HTTP/1.1\r\nHost: x\r\nUpgrade: DERP\r\nConnection: Upgrade\r\n\r\n")
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
        machine = ClientConnection(generate_private_key(), info=ClientInfoJSON(mesh_key="ab" * 32))
        events: list = []
        while not any(isinstance(e, Connected) for e in events):
            events = machine.receive_data(await asyncio.wait_for(reader.read(65536), TIMEOUT))
            writer.write(machine.data_to_send())
        writer.write(df.WatchConns().encode())
        late = await client(server)  # and one that arrives while the watch runs
        await late.close()
        await early.send(late.endpoint_id, b"late is gone, early still works")
        await d.close()
        seen: list = []
        while not any(isinstance(e, df.PeerGone) and e.key == d.public_key for e in seen):
            seen += machine.receive_data(await asyncio.wait_for(reader.read(65536), TIMEOUT))
        # iroh endpoint ids reach watchers too (the mesh carries iroh), flagged so that no one takes
        # them for DERP keys: PeerPresent flag PRESENT_IS_IROH, PeerGone reason PEER_GONE_IROH
        assert sorted((e.key, e.flags) for e in seen if isinstance(e, df.PeerPresent)) == sorted(
            [(early.endpoint_id, df.PRESENT_IS_IROH), (d.public_key, df.PRESENT_IS_REGULAR),
             (late.endpoint_id, df.PRESENT_IS_IROH)])
        assert [(e.key, e.reason) for e in seen if isinstance(e, df.PeerGone)] == [
            (late.endpoint_id, df.PEER_GONE_IROH), (d.public_key, df.PEER_GONE_DISCONNECTED)]
        assert await early.ping(TIMEOUT) >= 0
        writer.close()
        await early.close()
