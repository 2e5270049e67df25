"""burrow-relay's QUIC address discovery (--qad-port) on 127.0.0.1, asked by burrow's QAD client
(client/nat/qad.py) and by hand-driven aioquic connections: the report names the address the packets came
from, follows a rebinding, goes only to peers that ask, and the port refuses what it must."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from prometheus_client import generate_latest

from burrow.client.nat.qad import QadFailed, observe
from burrow.packet_relay.config import RelayConfig
from burrow.packet_relay.server import RelayServer
from burrow.wire.qad import ALPN, Observed, Role
from burrow.wire.qad_quic import QadConnection
from harness.ports import free_port

from .derp_util import TIMEOUT, ca, running_relay


def metric(server: RelayServer, sample: str) -> float:
    for line in generate_latest(server.prometheus).decode().splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{sample} not exposed")


async def until(check, what: str) -> None:
    async with asyncio.timeout(TIMEOUT):
        while not check():
            await asyncio.sleep(0.02)


class Asker:
    """A hand-driven QAD client connection whose UDP socket can be swapped (a NAT rebinding)."""

    def __init__(self, server: RelayServer, role: Role | None = Role.RECEIVES) -> None:
        config = QuicConfiguration(is_client=True, alpn_protocols=[ALPN], server_name="localhost")
        config.load_verify_locations(ca(server))
        self.reports: list[Observed] = []
        self.quic = (QuicConnection(configuration=config) if role is None
                     else QadConnection(role=role, configuration=config, on_observed=self.reports.append))
        self.server = server
        self.protocol: QuicConnectionProtocol | None = None
        self.transports = []

    async def bind(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        proto = self.protocol or QuicConnectionProtocol(self.quic)
        transport, self.protocol = await loop.create_datagram_endpoint(lambda: proto, local_addr=("127.0.0.1", port))
        self.transports.append(transport)

    async def connect(self, port: int) -> None:
        await self.bind(port)
        self.protocol.connect(("127.0.0.1", self.server.qad_port))
        async with asyncio.timeout(TIMEOUT):
            await self.protocol.wait_connected()

    def close(self) -> None:
        self.protocol.close()
        for t in self.transports:
            t.close()


@pytest.fixture
async def relay(tmp_path):
    async with running_relay(tmp_path, qad_port=free_port(socket.SOCK_DGRAM)) as server:
        yield server


async def test_the_report_names_the_address_packets_come_from(relay):
    local = free_port(socket.SOCK_DGRAM)
    seen = await observe("127.0.0.1", relay.qad_port, ca_file=ca(relay), server_name="localhost",
                         local_port=local, timeout=TIMEOUT)
    assert (seen.host, seen.port, seen.seq) == ("127.0.0.1", local, 0)
    assert metric(relay, "burrow_relay_qad_handshakes_total") == 1
    assert metric(relay, "burrow_relay_qad_reports_total") == 1
    await until(lambda: relay.qad.connections == 0, "the client's close reached the relay")
    assert metric(relay, 'burrow_relay_qad_closed_total{result="ok"}') == 1


async def test_a_rebinding_gets_a_new_report(relay):
    asker = Asker(relay)
    first, second = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_DGRAM)
    try:
        await asker.connect(first)
        await until(lambda: asker.reports, "the first report")
        assert asker.reports[0] == Observed(0, "127.0.0.1", first)
        # the NAT gives the flow a new port: same connection, packets now from `second`
        asker.transports[0].close()
        await asker.bind(second)
        asker.quic.send_ping(1)
        asker.protocol.transmit()
        await until(lambda: len(asker.reports) == 2, "a report of the new address")
        assert asker.reports[1] == Observed(1, "127.0.0.1", second)
        assert asker.quic.observed == asker.reports[1]
    finally:
        asker.close()


async def test_only_peers_that_ask_get_reports(relay):
    plain, provider = Asker(relay, role=None), Asker(relay, role=Role.PROVIDES)
    try:
        await plain.connect(free_port(socket.SOCK_DGRAM))   # aioquic without the extension
        await provider.connect(free_port(socket.SOCK_DGRAM))  # offers reports, wants none
        await until(lambda: metric(relay, "burrow_relay_qad_handshakes_total") == 2, "both handshakes")
        plain.quic.send_ping(2)
        plain.protocol.transmit()
        await asyncio.sleep(0.3)
        assert metric(relay, "burrow_relay_qad_reports_total") == 0
        assert provider.reports == [] and relay.qad.connections == 2
    finally:
        plain.close()
        provider.close()


async def test_certificate_is_verified(relay):
    with pytest.raises(QadFailed, match="handshake|no address report"):
        await observe("127.0.0.1", relay.qad_port, timeout=2)  # the self-signed certificate is not trusted


async def test_capacity_and_garbage_are_refused_and_counted(tmp_path):
    async with running_relay(tmp_path, qad_port=free_port(socket.SOCK_DGRAM), qad_max_connections=1) as relay:
        holder = Asker(relay)
        try:
            await holder.connect(free_port(socket.SOCK_DGRAM))
            with pytest.raises(QadFailed):
                await observe("127.0.0.1", relay.qad_port, ca_file=ca(relay), server_name="localhost", timeout=1)
            assert metric(relay, 'burrow_relay_qad_refused_total{reason="capacity"}') >= 1
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"\x40" + bytes(30), ("127.0.0.1", relay.qad_port))  # a short header for no connection
                s.sendto(b"", ("127.0.0.1", relay.qad_port))
            await until(lambda: relay.qad.datagrams["malformed"] + relay.qad.datagrams["not_initial"] >= 2,
                        "the garbage was counted")
            # the connection in place is unharmed
            holder.quic.send_ping(3)
            holder.protocol.transmit()
            await until(lambda: holder.reports, "the holder's report")
            assert relay.qad.connections == 1
        finally:
            holder.close()


async def test_qad_needs_a_certificate(tmp_path):
    config = RelayConfig(host="127.0.0.1", https_port=-1, http_port=0, stun_port=0, admin_port=0,
                         qad_port=free_port(socket.SOCK_DGRAM), key_file=str(tmp_path / "k"))
    server = RelayServer(config, http_ephemeral=True)
    with pytest.raises(ValueError, match="--qad-port needs"):
        await server.start()
    await server.stop()
