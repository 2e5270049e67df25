"""The iroh path wired into the relay's life cycle: config flags, Restarting on stop, SIGHUP reloads."""

import asyncio
import dataclasses

import aiohttp
import pytest
from nacl.signing import SigningKey

from common.config import load_config
from packet_relay.config import RelayConfig
from packet_relay.iroh import frames as f
from packet_relay.iroh.client import IrohRelayDenied
from packet_relay.iroh.service import IrohSettings
from packet_relay.server import RelayServer

from ..derp_util import client as derp_client
from ..derp_util import relay_config
from .util import TIMEOUT, client, http_url, iroh_relay, metric, wait_for


def test_flags_reach_the_iroh_settings():
    cfg = load_config(RelayConfig, "relay", ["--no-iroh", "--iroh-ping-interval", "3", "--iroh-pong-timeout",
                                             "1.5", "--iroh-tokens-file", "/x", "--no-iroh-tls-auth"])
    assert IrohSettings.from_config(cfg) == IrohSettings(enabled=False, tokens_file="/x", ping_interval=3.0,
                                                         pong_timeout=1.5, handshake_timeout=cfg.handshake_timeout,
                                                         tls_auth=False)


async def test_graceful_stop_sends_restarting_to_iroh_and_derp(tmp_path):
    server = RelayServer(relay_config(tmp_path, restart_reconnect_ms=1500, restart_try_for_ms=30000),
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
