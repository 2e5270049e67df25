"""One replica's sharded pub/sub channel for one app, read by a blocking reader (no polling).

Used with `rediss://` and Redis Cluster; otherwise the store reads its channels on its lean connection.

After losing Redis the reader backs off, resubscribes and asks its owner to re-read the subscribed
mailboxes (`resync`), so messages published while it was away still reach their subscribers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import typing

from redis import asyncio as aioredis

from burrow.common.redis import COMMAND_TIMEOUT, UNAVAILABLE, Backoff, RedisLink

log = logging.getLogger("mailbox_server")


class BusOwner(typing.Protocol):
    link: RedisLink

    def bus_message(self, app: str, data: bytes) -> None: ...

    async def resync(self, app: str) -> None: ...


class Bus:
    """This replica's channel for one app: a blocking reader that resubscribes (and resyncs) after a loss."""

    def __init__(self, store: BusOwner, channel: str, app: str) -> None:
        self.store, self.channel, self.app = store, channel, app
        self.ready = asyncio.Event()
        self._client = None
        self.task = asyncio.create_task(self._run(), name="mailbox-bus")

    async def wait_ready(self) -> bool:
        try:
            await asyncio.wait_for(self.ready.wait(), COMMAND_TIMEOUT)
            return True
        except TimeoutError:
            return False

    async def _pubsub(self):
        link = self.store.link
        if not link.cluster:
            return link.client.pubsub()
        node = link.client.get_node_from_key(self.channel)  # the node serving the app's slot
        self._client = aioredis.Redis(host=node.host, port=node.port, socket_connect_timeout=COMMAND_TIMEOUT,
                                      **_node_options(link.client))
        return self._client.pubsub()

    async def _run(self) -> None:
        backoff = Backoff()
        lost = False
        while True:
            ps = None
            try:
                ps = await self._pubsub()
                await ps.ssubscribe(self.channel)
                while True:  # the confirmation comes first
                    msg = await asyncio.wait_for(ps.get_message(timeout=None), COMMAND_TIMEOUT)
                    if msg is not None and _text(msg["type"]) == "ssubscribe":
                        break
                self.ready.set()
                if lost:
                    await self.store.resync(self.app)
                backoff.reset()
                while True:
                    msg = await ps.get_message(timeout=None)
                    if msg is not None and _text(msg["type"]) == "smessage":
                        self.store.bus_message(self.app, msg["data"])
            except asyncio.CancelledError:
                raise
            except (*UNAVAILABLE, TimeoutError) as exc:
                log.warning("pub/sub for %s lost: %s", self.channel, exc)
            except Exception:
                log.exception("pub/sub reader for %s failed", self.channel)
            finally:
                self.ready.clear()
                if ps is not None:
                    with contextlib.suppress(Exception):
                        await ps.aclose()
                if self._client is not None:
                    with contextlib.suppress(Exception):
                        await self._client.aclose()
                    self._client = None
            lost = True
            await asyncio.sleep(backoff.next_delay())

    async def close(self, wait: float = 5.0) -> None:
        """Stop the reader; its cleanup gets `wait` seconds."""
        self.task.cancel()
        await asyncio.wait([self.task], timeout=wait)


def _node_options(cluster) -> dict:
    """Credentials and TLS of the cluster client, for the plain client a shard subscription needs."""
    kw = cluster.get_connection_kwargs() if hasattr(cluster, "get_connection_kwargs") else {}
    return {k: v for k, v in kw.items() if k in ("username", "password", "ssl", "ssl_ca_certs", "ssl_certfile",
                                                 "ssl_keyfile", "ssl_cert_reqs")}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
