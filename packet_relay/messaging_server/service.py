"""MessagingService: the relay's messaging port (Skywire's protocol): listener, switch, flushes, metrics, discovery.

Off unless `--messaging-port` is set. The server's identity is a secp256k1 key (`--messaging-key-file`),
separate from the DERP key. With `--discovery-url` it publishes its server entry (address and available
connections) at start and every `--discovery-refresh` seconds, and at shutdown says it has no room left
so clients stop picking it before its entry expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from burrow.common.limits import ConnectionCaps
from burrow.common.listen import tcp_listener
from burrow.common.metrics import labelled_counter
from burrow.messaging import keys
from burrow.messaging.switch import Switch

from .conn import MessagingConn
from .register import Registration

log = logging.getLogger(__name__)

# every reason label the server side can produce (messaging/switch.py, messaging/handshake.py as responder,
# messaging/frames.py, conn.py), shown at 0 from the start
REFUSED_REASONS = ("id_crossed", "unknown_remote", "channels_full")
DROPPED_REASONS = ("not_open", "unknown_channel", "closing")
HANDSHAKE_REASONS = ("bad_json", "bad_field", "too_long", "version", "wrong_responder", "echo_mismatch", "bad_sig2",
                     "full", "handshake", "timeout")
PROTOCOL_REASONS = ("bad_length", "unknown_type", "unexpected_opened", "channel_in_use", "protocol")
CLOSE_REASONS = ("client", "handshake", "protocol", "timeout", "stalled", "shutdown", "duplicate")


@dataclass(frozen=True)
class MessagingSettings:
    port: int = 0                     # 0 = off
    host: str = "::"
    key_file: str | None = None
    address: str | None = None        # host:port published in discovery
    discovery_url: str | None = None
    discovery_refresh: float = 20.0
    max_links: int = 10000
    max_links_per_ip: int = 0
    handshake_timeout: float = 10.0
    write_timeout: float = 10.0

    @classmethod
    def from_config(cls, config) -> MessagingSettings:
        return cls(port=config.messaging_port, host=config.host, key_file=config.messaging_key_file,
                   address=config.messaging_address, discovery_url=config.discovery_url,
                   discovery_refresh=config.discovery_refresh, max_links=config.messaging_max_links,
                   max_links_per_ip=config.max_connections_per_ip, handshake_timeout=config.handshake_timeout,
                   write_timeout=config.write_timeout)


class MessagingService:
    def __init__(self, settings: MessagingSettings, events=None, ephemeral_port: bool = False) -> None:
        self.settings = settings
        self.enabled = settings.port > 0 or ephemeral_port
        self.key = keys.load_or_create(settings.key_file) if self.enabled else None
        self.events = events
        self.switch = Switch()
        self.caps = ConnectionCaps(0, settings.max_links_per_ip)
        self.conns: set[MessagingConn] = set()
        self.stats: Counter[str] = Counter()   # refused_connection_limit, handshake_<reason>, protocol_<kind>
        self.closes: Counter[str] = Counter()  # close reason -> links
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.registration: Registration | None = None
        self._server: asyncio.base_events.Server | None = None
        self._flush_scheduled = False

    # ---- life cycle
    async def start(self) -> None:
        if not self.enabled:
            return
        self.loop = asyncio.get_running_loop()
        s = self.settings
        self._server = await self.loop.create_server(lambda: MessagingConn(self), sock=tcp_listener(s.host, s.port))
        self.port = self._server.sockets[0].getsockname()[1]
        if s.discovery_url:
            self.registration = Registration(s.discovery_url, self.key, self.address, self.available,
                                             s.discovery_refresh)
            await self.registration.start()
        log.info("messaging up: port %s key %s discovery %s", self.port, self.key.public.hex(),
                 s.discovery_url or "off")

    @property
    def address(self) -> str:
        if self.settings.address:
            return self.settings.address
        host = self.settings.host
        return f"{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{self.port}"

    def available(self) -> int:
        return max(0, self.settings.max_links - len(self.switch.links))

    async def stop(self) -> None:
        if not self.enabled or self._server is None:
            return
        self._server.close()
        if self.registration is not None:
            await self.registration.stop()  # publishes "no room" first
        for conn in list(self.conns):
            conn.close("shutdown")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2.0)

    # ---- links
    def admit(self, _key: bytes) -> bool:
        return len(self.switch.links) < self.settings.max_links

    def link_up(self, conn: MessagingConn, key: bytes) -> None:
        link, old = self.switch.add_link(key, conn)
        conn.link = link
        self.stats["links_accepted"] += 1
        if old is not None and old.owner is not None:
            old.owner.close("duplicate")

    def link_down(self, conn: MessagingConn) -> None:
        self.conns.discard(conn)
        if conn.admitted:
            conn.admitted = False
            self.caps.release(conn.peer_ip)
        link = conn.link
        if link is None:
            return
        self.switch.link_lost(link)
        if self.switch.dirty:
            self.schedule_flush()
        self.closes[conn.close_reason] += 1
        if self.events is not None:
            self.events.emit("messaging_link", started=conn.started, duration=max(0.0, time.time() - conn.started),
                             channels_opened=link.channels_opened, frames_in=link.frames_in,
                             frames_out=link.frames_out, sends_in=link.sends_in, sends_out=link.sends_out,
                             bytes_in=link.bytes_in, bytes_out=link.bytes_out, close_reason=conn.close_reason)

    # ---- output: one write per dirty link per loop pass
    def schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        for link in self.switch.take_dirty():
            if link.owner is not None:
                link.owner.flush()

    # ---- metrics
    def collect(self):
        g = GaugeMetricFamily("burrow_relay_messaging_links", "Messaging links with a finished handshake")
        g.add_metric([], len(self.switch.links))
        yield g
        sw = self.switch.stats
        c = CounterMetricFamily("burrow_relay_messaging_sends_forwarded", "Send frames forwarded between links")
        c.add_metric([], sw.get("sends_forwarded", 0))
        yield c
        c = CounterMetricFamily("burrow_relay_messaging_forwarded_bytes", "Ciphertext bytes forwarded in Send frames")
        c.add_metric([], sw.get("bytes_forwarded", 0))
        yield c
        c = CounterMetricFamily("burrow_relay_messaging_channels_opened", "Channels the responder accepted")
        c.add_metric([], self.switch.channels_opened)
        yield c
        yield _by_prefix("burrow_relay_messaging_channels_refused", "OpenChannel refused, by reason", sw, "refused_",
                         REFUSED_REASONS)
        yield _by_prefix("burrow_relay_messaging_frames_dropped", "Frames for channels not (or no longer) open",
                         sw, "dropped_", DROPPED_REASONS)
        yield _by_prefix("burrow_relay_messaging_handshake_failures", "Link handshakes failed, by reason",
                         self.stats, "handshake_", HANDSHAKE_REASONS)
        yield _by_prefix("burrow_relay_messaging_protocol_errors", "Links closed for bad frames, by kind",
                         self.stats, "protocol_", PROTOCOL_REASONS)
        yield labelled_counter("burrow_relay_messaging_closes", "Links closed, by reason", ["reason"], self.closes,
                               CLOSE_REASONS)
        if self.registration is not None:
            yield from self.registration.collect()


def _by_prefix(name: str, doc: str, counts, prefix: str, known: tuple[str, ...]) -> CounterMetricFamily:
    found = {key[len(prefix):]: n for key, n in counts.items() if key.startswith(prefix)}
    return labelled_counter(name, doc, ["reason"], found, known)
