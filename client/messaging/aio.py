"""MessagingClient: advertise in discovery, dial and accept Noise KK channels (Skywire's protocol), re-delegate.

    client = MessagingClient(secret_key, "http://discovery:4003")
    await client.start()                     # link to servers, publish {"client": {"delegated_servers": ...}}
    ch = await client.dial(remote_public_key)   # or: ch = await client.accept()
    await ch.send(b"hello"); reply = await ch.recv(); await ch.close()
    await client.close()

The client keeps `server_count` links (to the servers named in `servers` first, then to the discovery's
available servers). Dialling uses a link to one of the remote's delegated servers, opening one when none
is shared (specification: "the client will connect to one of these servers"). Every link it holds is listed in its
entry (as Skywire's client does). When a link is lost its channels end, and the client links to another
server (skipping ones that just failed) and publishes its entry again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from burrow.messaging import keys
from burrow.messaging.entry import ClientInfo, Entry
from burrow.messaging.errors import HandshakeError, KeyFormatError

from .discovery import DiscoveryClient, DiscoveryError, Publisher
from .link import Channel, ChannelRefusedError, ServerLink

log = logging.getLogger(__name__)
FAILED_SERVER_PAUSE = 60.0  # seconds a server that failed us is not tried again (it may not have expired yet)


class PeerNotFound(Exception):
    """The remote key has no entry in discovery, or its entry names no server we can reach."""


def parse_server(text: str) -> tuple[bytes | None, str]:
    """`PUBKEY@host:port` or `host:port` -> (key or None, address)."""
    key_hex, sep, address = text.rpartition("@")
    if not sep:
        address, key_hex = text, ""
    if ":" not in address:
        raise ValueError(f"server {text!r} is not host:port or PUBKEY@host:port")
    try:
        key = keys.parse_public_key(key_hex) if key_hex else None
    except KeyFormatError as exc:
        raise ValueError(f"server {text!r}: {exc}") from exc
    return key, address


class MessagingClient:
    def __init__(self, secret: keys.SecretKey, discovery_url: str, servers: list[str] | None = None,
                 server_count: int = 1, accept: Callable[[bytes], bool] = lambda _k: True,
                 refresh: float = 20.0, timeout: float = 10.0, max_queued: int = 1024,
                 close_timeout: float = 5.0, max_pending_accepts: int = 256) -> None:
        self.secret = secret
        self.public = secret.public
        self.discovery = DiscoveryClient(discovery_url, timeout)
        self.publisher = Publisher(self.discovery, secret)
        self.wanted = [parse_server(s) for s in servers or []]
        self.server_count = max(1, server_count if not servers else len(servers))
        self.accept_policy = accept
        self.refresh = refresh
        self.timeout = timeout
        self.max_queued = max_queued
        self.close_timeout = close_timeout
        self.links: dict[bytes, ServerLink] = {}
        self._incoming: asyncio.Queue[Channel] = asyncio.Queue(max_pending_accepts)
        self._failed: dict[bytes, float] = {}
        self._closing = False
        self._tasks: set[asyncio.Task] = set()
        self._lock = asyncio.Lock()

    # ---- life cycle
    async def start(self) -> None:
        """Link to `server_count` servers and publish our entry; raises DiscoveryError or ConnectionError."""
        async with self._lock:
            await self._fill()
            if not self.links:
                raise ConnectionError("no messaging server could be reached")
            await self._publish()
        self._spawn(self._refresh_loop())

    async def close(self) -> None:
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        for link in list(self.links.values()):
            await link.close()
        self.links.clear()
        await self.discovery.close()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- servers
    async def _candidates(self) -> list[tuple[bytes, str]]:
        """The servers named in `servers` first, then the discovery's available servers (most room first)."""
        listed = await self.discovery.available_servers()
        found = []
        for key, address in self.wanted:
            if key is None:  # only an address: its key comes from the discovery's server list
                key = next((e.static for e in listed if e.server.address == address), None)
                if key is None:
                    log.warning("no server entry in discovery has address %s", address)
                    continue
            found.append((key, address))
        return found + [(e.static, e.server.address) for e in listed]

    async def _fill(self) -> None:
        """Link to servers until `server_count` links are up (or the candidates run out)."""
        now = time.monotonic()
        for key, address in await self._candidates():
            if len(self.links) >= self.server_count:
                return
            if key in self.links or self._failed.get(key, 0) > now:
                continue
            await self._link(key, address)

    async def _link(self, key: bytes, address: str) -> ServerLink | None:
        link = ServerLink(self.secret, key, address, self._incoming_channel, self._link_lost, self.accept_policy,
                          self.max_queued, self.close_timeout)
        try:
            await link.connect(self.timeout)
        except (OSError, TimeoutError, HandshakeError, ValueError) as exc:
            log.warning("cannot link to server %s at %s: %s", key.hex()[:16], address, exc)
            self._failed[key] = time.monotonic() + FAILED_SERVER_PAUSE
            return None
        self.links[key] = link
        return link

    async def _publish(self) -> None:
        servers = tuple(self.links)
        await self.publisher.publish(lambda seq, ts: Entry(self.public, seq, ts, client=ClientInfo(servers)))

    def _link_lost(self, link: ServerLink) -> None:
        if self.links.get(link.server_key) is link:
            del self.links[link.server_key]
        if not self._closing:
            self._failed[link.server_key] = time.monotonic() + FAILED_SERVER_PAUSE
            self._spawn(self._redelegate())

    async def _redelegate(self) -> None:
        """Refill the links after a loss and publish the new list; retries until it succeeds."""
        delay = 0.2
        while not self._closing:
            try:
                async with self._lock:
                    await self._fill()
                    if self.links:
                        await self._publish()
                        return
            except DiscoveryError as exc:
                log.warning("re-delegation: %s", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh)
            try:
                async with self._lock:
                    if len(self.links) < self.server_count:
                        await self._fill()
                    await self._publish()
            except DiscoveryError as exc:
                log.warning("entry refresh failed: %s", exc)

    # ---- channels
    def _incoming_channel(self, channel: Channel) -> None:
        try:
            self._incoming.put_nowait(channel)
        except asyncio.QueueFull:  # nobody is accepting: refuse by closing at once
            self._spawn(channel.close())

    async def accept(self) -> Channel:
        return await self._incoming.get()

    async def dial(self, remote: bytes) -> Channel:
        """Open a channel to `remote`; raises PeerNotFound, ChannelRefusedError or DiscoveryError."""
        entry = await self.discovery.entry(remote)
        if entry is None or entry.client is None:
            raise PeerNotFound(f"{remote.hex()} has no client entry in discovery")
        servers = list(entry.client.delegated_servers or ())
        if not servers:
            raise PeerNotFound(f"{remote.hex()} names no messaging server")
        async with self._lock:
            link = next((self.links[k] for k in servers if k in self.links and self.links[k].alive), None)
            if link is None:
                link = await self._link_to_one_of(servers)
                await self._publish()
        return await link.open(remote, self.timeout)

    async def _link_to_one_of(self, servers: list[bytes]) -> ServerLink:
        for key in servers:
            server = await self.discovery.entry(key)
            if server is None or server.server is None:
                continue
            link = await self._link(key, server.server.address)
            if link is not None:
                return link
        raise PeerNotFound("none of the remote's servers can be reached")


__all__ = ["MessagingClient", "Channel", "ChannelRefusedError", "PeerNotFound", "parse_server"]
