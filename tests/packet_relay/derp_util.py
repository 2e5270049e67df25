"""Helpers for the DERP integration tests: a real relay on 127.0.0.1 (ephemeral ports) and a raw
client connection that speaks the protocol by hand (for misbehaving-client tests)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import ssl

from burrow.client.derp import DerpClient
from burrow.packet_relay.config import RelayConfig
from burrow.packet_relay.server import RelayServer
from burrow.wire.derp import frames as f
from burrow.wire.derp.connection import ClientConnection, Connected
from harness.ports import free_port

TIMEOUT = 10.0


def relay_config(tmp_path, **overrides) -> RelayConfig:
    base = RelayConfig(host="127.0.0.1", https_port=0, dev_tls=True, tls_dir=str(tmp_path / "tls"),
                       stun_port=0, admin_port=0, event_log=str(tmp_path / "relay.jsonl"),
                       key_file=str(tmp_path / "relay.key"), shutdown_grace=0.5)
    return dataclasses.replace(base, **overrides)


@contextlib.asynccontextmanager
async def running_relay(tmp_path, **overrides):
    http = overrides.pop("_http", False)
    stun = overrides.pop("_stun", False)
    server = RelayServer(relay_config(tmp_path, **overrides), http_ephemeral=http, stun_ephemeral=stun)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def two_node_mesh(tmp_path) -> tuple[list[int], dict]:
    """Settings for relays a and b meshed in this process (directories tmp_path/a and tmp_path/b made):
    their HTTPS ports, and what both pass to running_relay (one certificate, one mesh key, both peers)."""
    mesh_key = tmp_path / "mesh.key"
    mesh_key.write_text(os.urandom(32).hex())
    ports = [free_port(), free_port()]
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    return ports, dict(tls_dir=str(tmp_path / "tls"), mesh_key_file=str(mesh_key),
                       mesh_ca_file=str(tmp_path / "tls/relay.crt"),
                       mesh_with=",".join(f"https://127.0.0.1:{p}" for p in ports))


def url(server: RelayServer) -> str:
    return f"https://127.0.0.1:{server.https_port}"


def ca(server: RelayServer) -> str:
    return server.config.tls_dir + "/relay.crt"


async def client(server: RelayServer, **kw) -> DerpClient:
    c = DerpClient(url(server), ca_file=ca(server), connect_timeout=TIMEOUT, **kw)
    await c.start()
    return c


class RawClient:
    """A hand-driven DERP connection over TLS: write any bytes, read frames."""

    def __init__(self, reader, writer, machine: ClientConnection) -> None:
        self.reader, self.writer, self.machine = reader, writer, machine

    @classmethod
    async def open(cls, server: RelayServer, private_key: bytes | None = None, handshake: bool = True,
                   request: bytes = b"GET /derp HTTP/1.1\r\nHost: x\r\nUpgrade: DERP\r\nConnection: Upgrade\r\n\r\n"):
        from burrow.wire.derp.handshake import generate_private_key

        ctx = ssl.create_default_context(cafile=ca(server))
        reader, writer = await asyncio.open_connection("127.0.0.1", server.https_port, ssl=ctx,
                                                       server_hostname="127.0.0.1")
        writer.write(request)
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
        raw = cls(reader, writer, ClientConnection(private_key or generate_private_key()))
        if handshake:
            while True:
                events = raw.machine.receive_data(await asyncio.wait_for(reader.read(65536), TIMEOUT))
                writer.write(raw.machine.data_to_send())
                if any(isinstance(e, Connected) for e in events):
                    break
        return raw

    @property
    def key(self) -> bytes:
        return self.machine.client_public

    async def frames_until_eof(self) -> list:
        out = []
        while data := await asyncio.wait_for(self.reader.read(65536), TIMEOUT):
            with contextlib.suppress(f.ProtocolError):
                out += self.machine.receive_data(data)
        return out

    def close(self) -> None:
        self.writer.close()
