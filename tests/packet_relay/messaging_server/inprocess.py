"""In-process fixtures for the messaging tests: a discovery and messaging services on 127.0.0.1, real TCP."""

from __future__ import annotations

import asyncio
import contextlib
import socket

from burrow.client.messaging.aio import MessagingClient
from burrow.discovery.config import DiscoveryConfig
from burrow.discovery.server import DiscoveryServer
from burrow.messaging import keys
from burrow.messaging.client_link import ClientLink
from burrow.messaging.handshake import InitiatorHandshake
from burrow.packet_relay.messaging_server.service import MessagingService, MessagingSettings


class Cluster:
    """One discovery and `servers` messaging services; `client()` makes started clients."""

    def __init__(self) -> None:
        self.discovery: DiscoveryServer | None = None
        self.services: list[MessagingService] = []
        self.clients: list[MessagingClient] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.discovery.port}"

    async def start(self, servers: int = 2, **settings) -> Cluster:
        self.discovery = DiscoveryServer(DiscoveryConfig(host="127.0.0.1", port=0, admin_port=0))
        await self.discovery.start()
        for _ in range(servers):
            await self.add_service(**settings)
        return self

    async def add_service(self, **settings) -> MessagingService:
        svc = MessagingService(MessagingSettings(host="127.0.0.1", discovery_url=self.url, **settings),
                               ephemeral_port=True)
        await svc.start()
        self.services.append(svc)
        return svc

    def addr(self, svc: MessagingService) -> str:
        return f"{svc.key.public.hex()}@127.0.0.1:{svc.port}"

    async def client(self, svc: MessagingService | None = None, **kw) -> MessagingClient:
        c = MessagingClient(keys.SecretKey.generate(), self.url, servers=[self.addr(svc)] if svc else None,
                            timeout=5.0, **kw)
        await c.start()
        self.clients.append(c)
        return c

    async def stop(self) -> None:
        for c in self.clients:
            await c.close()
        for svc in self.services:
            await svc.stop()
        if self.discovery is not None:
            await self.discovery.stop()


class RawLink:
    """A hand-driven client link: the handshake, then ClientLink, with every byte visible to the test."""

    def __init__(self, reader, writer, machine: ClientLink) -> None:
        self.reader, self.writer, self.machine = reader, writer, machine
        self.events: list = []

    @classmethod
    async def connect(cls, svc: MessagingService, secret: keys.SecretKey | None = None,
                      rcvbuf: int | None = None) -> RawLink:
        secret = secret or keys.SecretKey.generate()
        if rcvbuf is not None:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", svc.port))
            reader, writer = await asyncio.open_connection(sock=sock, limit=rcvbuf)
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", svc.port)
        hs = InitiatorHandshake(secret, svc.key.public)
        writer.write(hs.start())
        while not hs.complete:
            data = await asyncio.wait_for(reader.read(65536), 5)
            assert data, "server closed during the handshake"
            out = hs.receive_data(data)
            writer.write(out)
        link = cls(reader, writer, ClientLink(secret))
        link.events = link.machine.receive_data(hs.rest)
        return link

    async def until(self, predicate, timeout: float = 5.0) -> list:
        """Read and dispatch until `predicate(events)` holds; returns all events seen."""
        async with asyncio.timeout(timeout):
            while not predicate(self.events):
                self.flush()
                data = await self.reader.read(65536)
                if not data:
                    raise ConnectionError("link closed")
                self.events += self.machine.receive_data(data)
            self.flush()
        return self.events

    def flush(self) -> None:
        out = self.machine.data_to_send()
        if out:
            self.writer.write(out)

    async def closed_by_server(self, timeout: float = 5.0) -> bool:
        with contextlib.suppress(ConnectionError):
            async with asyncio.timeout(timeout):
                while await self.reader.read(65536):
                    pass
        return True
