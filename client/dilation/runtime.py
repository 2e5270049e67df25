"""The asyncio Dilation runtime: one object per dilated wormhole (aio.py builds it from a Wormhole).

in:  `dilate-N` plaintexts (received_message), the peer's versions (start), app calls (open, listen, close)
out: `dilate-N` messages (send_phase), (reader, writer) pairs per subchannel, status events, records

It glues the sans-IO layers: manager.Manager (L1) decides generations, transport.Connector runs one
generation's race (L2; generations.py starts and stops them), connection.Keepalive watches the selected
connection (L3), reliable.Outbound/Inbound re-send and deduplicate (L4), subchannel.Mux routes
OPEN/DATA/CLOSE (L5; subchannel_io.py serves the stream objects).

Flow control: writers `await drain()` while the unacknowledged bytes exceed `max_unacked_bytes` or the
socket's buffer is above its high-water mark; the L2 connection stops reading while any subchannel reader holds
more than twice `reader_limit` bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from burrow.client.dilation import upgrade
from burrow.client.dilation.connection import (
    KCM,
    SEQUENCED,
    SUPPORTED_VERSIONS,
    Ack,
    Data,
    Keepalive,
    Ping,
    Pong,
    RecordCodec,
    Stop,
)
from burrow.client.dilation.disco_link import close_quietly
from burrow.client.dilation.errors import DilationError, ProtocolError
from burrow.client.dilation.framing import DEFAULT_MAX_FRAME
from burrow.client.dilation.generations import Generations
from burrow.client.dilation.l2protocol import L2Protocol
from burrow.client.dilation.manager import (
    Abandon,
    Failed,
    LateHints,
    Manager,
    Send,
    StartConnecting,
    Status,
    StopConnecting,
    UseHints,
)
from burrow.client.dilation.reliable import DEFAULT_MAX_UNACKED_BYTES, Inbound, Outbound, record_size
from burrow.client.dilation.selection import QUIC_MARGIN, UPGRADE_INTERVAL, UpgradePolicy
from burrow.client.dilation.stream import SubchannelListener, SubchannelReader, SubchannelWriter
from burrow.client.dilation.subchannel import Accepted, EndOfStream, Finished, Ignored, Mux, Pending, Received
from burrow.client.dilation.subchannel_io import SubchannelIO
from burrow.client.dilation.transport import Connector, parse_relay_location
from burrow.client.dilation.versions import (
    RELAY_FIRST_EXTENSION,
    STOP_EXTENSION,
    UPGRADE_EXTENSION,
    peer_extensions,
)

log = logging.getLogger(__name__)

# bytes of app data per DATA record: with its 9-byte header, 65471 plaintext bytes, one Noise message. OpenSSL's
# AVX-512 Poly1305 seals and opens that length in 14.3 us but the full 65519 bytes in 19.0 us (measured
# here); the frames of larger records must be cut into 65519-byte messages
MAX_RECORD_PAYLOAD = 65462
READER_LIMIT = 1024 * 1024  # bytes a subchannel reader buffers before the connection pauses (x2)
LISTEN_BACKLOG = 64  # accepted subchannels waiting for `accept()` per subprotocol
GENERATION_TIMEOUT = 60.0  # seconds the Leader waits for a generation to connect before starting another
CLOSE_TIMEOUT = 10.0  # seconds `close()` waits for our queued records to be acknowledged
# ACKs are cumulative, so one per batch of reads is enough: ack at once after this many sequenced bytes,
# otherwise within ACK_DELAY. Each ACK costs a send here, two splices in a relay and a wakeup at the sender.
ACK_EVERY_BYTES = 2 * 1024 * 1024
ACK_DELAY = 0.005


@dataclass(frozen=True)
class DilationStatus:
    # waiting | wanting | connecting | connected | reconnecting | stopped | failed, and the no-path event
    # (docs/dilation.md)
    state: str
    generation: int
    path: str | None = None  # for "connected": e.g. "direct tcp:10.0.0.5:4711" or "relay tcp:host:4001"
    reason: str | None = None  # for "failed"; for "no-path": what was tried
    # for "no-path": (connection hints we sent, hints we received) in this generation; when the peer's own no-path
    # counts mirror these, neither side has anything left to try
    hints: tuple[int, int] | None = None


class Dilation(Generations, SubchannelIO):
    """One dilated wormhole. Applications use open(), listen(), when_connected(), when_stopped(), flush(),
    close(), and read status, leader and counters (docs/dilation.md says what each means); the other methods
    are called by transport.py, l2protocol.py and stream.py (those of stream.py are in subchannel_io.py, the
    generations' in generations.py), and the other attributes are the layers' state."""

    def __init__(self, *, send_phase: Callable[[str, bytes], None], dilation_key: bytes,
                 transit_relay: str | None = None, listen: bool = True, listen_addresses: list[str] | None = None,
                 ping_interval: float = 30.0, relay_delay: float = 2.0, side: str | None = None,
                 on_status: Callable[[DilationStatus], None] | None = None,
                 max_unacked_bytes: int = DEFAULT_MAX_UNACKED_BYTES, reader_limit: int = READER_LIMIT,
                 max_record_payload: int = MAX_RECORD_PAYLOAD, max_frame: int = DEFAULT_MAX_FRAME,
                 generation_timeout: float = GENERATION_TIMEOUT, versions: tuple[str, ...] = SUPPORTED_VERSIONS,
                 ack_every_bytes: int = ACK_EVERY_BYTES, ack_delay: float = ACK_DELAY, nat=None,
                 upgrade_interval: float = UPGRADE_INTERVAL, quic_margin: float = QUIC_MARGIN):
        self._send_phase = send_phase
        self._nat = nat  # client.nat.hints.NatOptions: external hints (STUN, port mapping); None = local only
        self._key = dilation_key
        self._relay = parse_relay_location(transit_relay) if transit_relay else None
        self._listen, self._listen_addresses = listen, listen_addresses
        self._ping_interval, self._relay_delay = ping_interval, relay_delay
        self._on_status = on_status
        self._reader_limit = reader_limit
        self.max_record_payload = max_record_payload
        self._max_frame = max_frame
        self._generation_timeout = generation_timeout
        self._ack_every_bytes, self._ack_delay = ack_every_bytes, ack_delay
        self.manager = Manager(side=side, versions=versions)
        self.outbound = Outbound(max_unacked_bytes)
        self.inbound = Inbound()
        self.mux: Mux | None = None
        self.codec: RecordCodec | None = None
        self.status = DilationStatus("waiting", 0)
        self.connection: L2Protocol | None = None
        self._connector: Connector | None = None
        # a connected generation whose listeners await upgrade probes, or that searches behind the relay
        self._probed: Connector | None = None
        self._keepalive: Keepalive | None = None
        self._ka_timer: asyncio.TimerHandle | None = None
        self._gen_timer: asyncio.TimerHandle | None = None
        self._ack_timer: asyncio.TimerHandle | None = None
        self._ack_bytes = 0  # sequenced bytes received since our last ACK
        self._loop = asyncio.get_running_loop()
        self._role_known = self._loop.create_future()
        self._first_connection = self._loop.create_future()
        self._stopped = self._loop.create_future()
        self._writable = asyncio.Event()
        self._writable.set()
        self._transport_paused = False
        self._paused_readers: set[int] = set()
        self._readers: dict[int, SubchannelReader] = {}
        self._writers: dict[int, SubchannelWriter] = {}
        self._listeners: dict[str, asyncio.Queue] = {}
        self._tasks: set[asyncio.Task] = set()
        self._peer_takes_stop = False  # the peer offered the stop-v1 extension
        self._peer_upgrades = False  # the peer offered upgrade-v1: leave the relay for a direct path mid-transfer
        self._relay_first = False  # the peer offered relay-first-v1 too: no head start, search behind the relay
        self._upgrade = UpgradePolicy(interval=upgrade_interval, quic_margin=quic_margin)
        self._peer_disco: tuple | None = None  # the peer's derp-disco-v1 hint, parsed (disco_link.parse_hint)
        self._prefer_quic = False  # a QUIC probe beat the relay: later generations take QUIC over relayed TCP
        self.rates: dict[str, float | None] = {"relay": None, "quic": None}  # bytes/s at the last upgrade look
        self._disco: asyncio.Task | None = None  # starts our DiscoLink (UDP punching) once, for every generation
        self.counters = {"records_in": 0, "records_out": 0, "resent": 0, "duplicates": 0, "ignored": 0,
                         "acks_out": 0, "connections": 0, "bad_connections": 0, "upgrades": 0,
                         "quic_probes": 0}

    # ---------------------------------------------------------------- L1 plumbing
    def start(self, peer_versions: dict) -> None:
        self._peer_takes_stop = STOP_EXTENSION in peer_extensions(peer_versions)
        self._peer_upgrades = UPGRADE_EXTENSION in peer_extensions(peer_versions)
        self._relay_first = self._peer_upgrades and RELAY_FIRST_EXTENSION in peer_extensions(peer_versions)
        self._run(self.manager.start(peer_versions))

    def received_message(self, plaintext: bytes) -> None:
        try:
            msg = json.loads(plaintext)
        except ValueError:
            log.warning("ignoring a dilate message that is not JSON")
            return
        self._run(self.manager.receive(msg))

    def send_hints(self, hints: list) -> None:
        self._run([self.manager._send(type="connection-hints", hints=hints)])

    def _run(self, actions) -> None:
        for a in actions:
            if isinstance(a, Send):
                self._send_phase(a.phase, json.dumps(a.message).encode("utf-8"))
            elif isinstance(a, StartConnecting):
                self._start_generation(a.generation)
            elif isinstance(a, StopConnecting):
                self._stop_generation(connected=True)
            elif isinstance(a, UseHints):
                self._note_peer_disco(a.hints)
                if self._connector is not None and self._connector.generation == a.generation:
                    self._connector.use_hints(a.hints)
            elif isinstance(a, LateHints):
                self._note_peer_disco(a.hints)
                c = self._probed
                if c is not None and c.generation == a.generation and c.searching:
                    c.use_hints(a.hints)  # e.g. the peer's STUN or port-mapping hint, after the relay won
            elif isinstance(a, Abandon):
                if self.connection is not None:
                    self.connection.drop()
            elif isinstance(a, Status):
                self._set_status(a.name)
            elif isinstance(a, Failed):
                self._fail(a.reason)

    def _set_status(self, name: str, path: str | None = None) -> None:
        self.status = DilationStatus(name, self.manager.generation, path)
        if name == "stopped" and not self._stopped.done():
            self._stopped.set_result(None)
        if self._on_status is not None:
            self._on_status(self.status)

    def _fail(self, reason: str) -> None:
        self.status = DilationStatus("failed", self.manager.generation, reason=reason)
        err = DilationError(reason)
        for f in (self._role_known, self._first_connection, self._stopped):
            if not f.done():
                f.set_exception(err)
                f.exception()  # mark retrieved: the caller may never await this one
        if self._on_status is not None:
            self._on_status(self.status)

    def _ensure_role(self) -> None:
        if self.mux is None and self.manager.leader is not None:
            self.codec = RecordCodec(self.manager.version or "ged")
            self.mux = Mux(leader=self.manager.leader, outbound=self.outbound, inbound=self.inbound)
            if not self._role_known.done():
                self._role_known.set_result(None)

    def _spawn(self, coro) -> None:
        t = self._loop.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._task_done)

    def _task_done(self, t: asyncio.Task) -> None:
        self._tasks.discard(t)
        if not t.cancelled() and t.exception() is not None:
            log.warning("dilation task failed: %r", t.exception())

    # ---------------------------------------------------------------- L2/L3 events
    def on_connection_made(self, connector: Connector, p: L2Protocol) -> None:
        if connector is not self._connector or self.connection is not None:
            p.drop()
            return
        self.counters["connections"] += 1
        self.connection = p
        p.selected(self)
        self._transport_paused = False
        if self._paused_readers:
            p.transport.pause_reading()
        self._run(self.manager.connection_made())
        self._set_status("connected", p.attempt.description)
        # L4: everything unacknowledged goes out again, in order, before anything new
        resend = self.outbound.unacked()
        self.counters["resent"] += len(resend)
        p.write_records(resend)
        now = self._loop.time()
        self._keepalive = Keepalive(leader=bool(self.manager.leader), interval=self._ping_interval, now=now,
                                    version=self.codec.version)
        self._keepalive_tick()
        self._update_writable()
        if not self._first_connection.done():
            self._first_connection.set_result(None)
        if self.manager.leader and self._peer_upgrades:
            self._upgrade.connected(now, relayed=p.attempt.via_relay)
            if self._upgrade.next_probe() is not None:
                self._spawn(upgrade.look_for_direct(self, p, connector))

    def on_connection_lost(self, p: L2Protocol) -> None:
        if p is not self.connection:
            return
        self._upgrade.lost()
        self.connection = None
        self._keepalive = None
        for timer in (self._ka_timer, self._ack_timer):
            if timer is not None:
                timer.cancel()
        self._ka_timer = self._ack_timer = None
        self._ack_bytes = 0  # the peer re-sends what we did not ACK; its duplicates are ACKed then
        self._update_writable()
        self._run(self.manager.connection_lost())

    def transport_paused(self, p: L2Protocol, paused: bool) -> None:
        if p is self.connection:
            self._transport_paused = paused
            self._update_writable()

    def _keepalive_tick(self) -> None:
        self._ka_timer = None
        ka, p = self._keepalive, self.connection
        if ka is None or p is None:
            return
        now = self._loop.time()
        for r in ka.tick(now):
            if r == "dead":
                log.info("dilation connection %s is silent; dropping it", p.attempt.description)
                p.drop()
                return
            self._send_now(r)
        self._ka_timer = self._loop.call_at(max(ka.next_deadline(), now + 0.01), self._keepalive_tick)

    def on_records(self, p: L2Protocol, records: list) -> None:
        if p is not self.connection or self.mux is None:
            return
        if self._keepalive is not None:
            self._keepalive.received(self._loop.time())
        self.counters["records_in"] += len(records)
        acked_before = self._ack_bytes
        try:
            for r in records:
                if type(r) is Data:  # the bulk path: one event, no lists
                    self._ack_bytes += record_size(r)
                    ev = self.mux.receive_data(r)
                    if ev is None:
                        self.counters["duplicates"] += 1
                    else:
                        self._deliver(ev)
                elif isinstance(r, SEQUENCED):  # a tuple: `Open | Close` would build a union on every call
                    self._ack_bytes += record_size(r)
                    if r.seqnum <= self.inbound.watermark:
                        self.counters["duplicates"] += 1
                        continue
                    events, replies = self.mux.receive(r)
                    for rec in replies:
                        self._send_now(rec)
                    for ev in events:
                        self._deliver(ev)
                elif isinstance(r, Ack):
                    self.outbound.ack(r.resp_seqnum)
                    if not self._writable.is_set():
                        self._update_writable()
                elif isinstance(r, Ping):
                    self._send_now(Pong(r.ping_id))
                elif isinstance(r, Pong | KCM):
                    pass
                elif isinstance(r, Stop):
                    self._peer_stopped()
                    return
        except ProtocolError as e:
            log.warning("dropping dilation connection: %s", e)
            self.counters["bad_connections"] += 1
            p.drop()
            return
        if self._ack_bytes == acked_before or self.connection is not p:
            return
        if self._ack_bytes >= self._ack_every_bytes:
            self._send_ack()
        elif self._ack_timer is None:
            self._ack_timer = self._loop.call_later(self._ack_delay, self._send_ack)

    def _peer_stopped(self) -> None:
        """The peer stopped for good: every subchannel ends (readers see EOF, writes fail), state "stopped"."""
        self._run(self.manager.peer_stopped())
        self._stop_generation()
        self._writable.set()  # drain() returns; the next write raises SubchannelClosed
        for r in self._readers.values():
            if not r._eof:
                r.feed_eof()
        for scid in list(self._writers):
            self._finished(scid)

    def _send_ack(self) -> None:
        """One cumulative ACK for everything delivered so far."""
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        self._ack_bytes = 0
        self.counters["acks_out"] += 1
        self._send_now(Ack(self.inbound.watermark))

    def _deliver(self, ev) -> None:
        if isinstance(ev, Received):
            reader = self._readers.get(ev.scid)
            if reader is not None:
                reader.feed_data(ev.data)
        elif isinstance(ev, Accepted):
            self._accepted(ev.scid, ev.subprotocol)
        elif isinstance(ev, Pending):
            self._make_pair(ev.scid, ev.subprotocol)
        elif isinstance(ev, EndOfStream):
            reader = self._readers.get(ev.scid)
            if reader is not None:
                reader.feed_eof()
        elif isinstance(ev, Finished):
            self._finished(ev.scid)
        elif isinstance(ev, Ignored):
            self.counters["ignored"] += 1
            log.debug("dilation: %s", ev.why)

    def _send_now(self, r) -> None:
        p = self.connection
        if p is not None and not p.closed:
            p.transport.write(p.attempt.encrypt(r))
            self.counters["records_out"] += 1
            if self._keepalive is not None:
                self._keepalive.sent(self._loop.time())

    def _update_writable(self) -> None:
        if self.outbound.full or self._transport_paused:
            self._writable.clear()
        else:
            self._writable.set()

    # ---------------------------------------------------------------- public API
    @property
    def leader(self) -> bool | None:
        return self.manager.leader

    async def when_connected(self) -> None:
        """Returns once the first connection is up (raises DilationError if dilation failed first)."""
        await self._first_connection

    async def when_stopped(self) -> None:
        """Returns once dilation has stopped: after our close(), or when the peer closed (state "stopped")."""
        await asyncio.shield(self._stopped)

    async def open(self, subprotocol: str) -> tuple[SubchannelReader, SubchannelWriter]:
        """Open a subchannel to the peer's listener for `subprotocol`."""
        await asyncio.shield(self._role_known)
        scid, rec = self.mux.open(subprotocol)
        pair = self._make_pair(scid, subprotocol)
        self._send_now(rec)
        return pair

    def listen(self, subprotocol: str, backlog: int = LISTEN_BACKLOG) -> SubchannelListener:
        """Accept subchannels the peer opens for `subprotocol` (`await listener.accept()`)."""
        if subprotocol in self._listeners:
            raise DilationError(f"already listening for {subprotocol!r}")
        q: asyncio.Queue = asyncio.Queue(backlog)
        self._listeners[subprotocol] = q
        listener = SubchannelListener(subprotocol, q)
        if self.mux is not None:
            for ev in self.mux.listen(subprotocol):
                self._deliver(ev)
        else:
            self._spawn(self._listen_when_ready(subprotocol))
        return listener

    async def _listen_when_ready(self, subprotocol: str) -> None:
        await asyncio.shield(self._role_known)
        for ev in self.mux.listen(subprotocol):
            self._deliver(ev)

    async def flush(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """Wait until the peer acknowledged everything we sent; False on timeout. Meanwhile our own ACKs go
        out without delay: the peer may be waiting in its flush() too."""
        deadline = self._loop.time() + timeout
        while True:
            if self._ack_timer is not None:
                self._send_ack()
            if not len(self.outbound) or self._loop.time() >= deadline or self.manager.state == "STOPPED":
                return not len(self.outbound)
            await asyncio.sleep(0.02)

    async def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Stop dilating: wait (bounded) for our data to be acknowledged, then drop everything."""
        if self.mux is not None and self.manager.state not in ("STOPPED", "STOPPING"):
            await self.flush(timeout)
            if self._peer_takes_stop:
                self._send_now(Stop())  # before the drop below: the peer reports "stopped", not "reconnecting"
        self._run(self.manager.stop())
        self._stop_generation()
        if self.connection is not None:
            self.connection.drop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._stopped), 2.0)
        for t in list(self._tasks):
            t.cancel()
        if self._disco is not None:
            self._disco.cancel()
            if self._disco.done() and not self._disco.cancelled() and self._disco.exception() is None:
                await close_quietly(self._disco.result())
        if self._ka_timer is not None:
            self._ka_timer.cancel()
        for r in self._readers.values():
            r.feed_eof()
