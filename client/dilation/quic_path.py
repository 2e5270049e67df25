"""QUIC on the Disco socket (aioquic, driven by hand): one connection per punched path, and what L2Protocol
needs of a transport over its one bidirectional stream (client/dilation/disco_link.py says when).

QUIC's TLS uses a throwaway self-signed certificate and neither side verifies it: Dilation's Noise handshake
inside the stream authenticates both sides with the wormhole's key, as it does on TCP.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl

from aioquic.buffer import Buffer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, StreamDataReceived
from aioquic.quic.packet import QuicPacketType, pull_quic_header

ALPN = "burrow-dilation"
WRITE_HIGH_WATER = 1024 * 1024  # stream bytes not yet acknowledged before the L2 writer pauses
MAX_HELD = 2048  # datagrams held for a connection whose reader paused; beyond, QUIC re-sends what we drop
STREAM_WINDOW = 8 * 1024 * 1024  # QUIC flow-control window (connection and stream)
IDLE_TIMEOUT = 30.0  # seconds of silence before a QUIC connection ends (Dilation pings every 30 s)
# bytes per UDP payload: aioquic's cost is per packet, and 1350 (as many QUIC stacks use) still passes
# links with a smaller MTU than Ethernet's (PPPoE, most tunnels)
MAX_DATAGRAM = 1350
# a rate probe: a stream that starts with PROBE_MAGIC and an 8-byte length, then that many bytes; the peer
# answers with the 8-byte count once all arrived (what moves the UpgradePolicy's QUIC figure)
PROBE_MAGIC = b"burrow-quic-rate-probe-v1\n"
PROBE_MAX = 16 * 1024 * 1024  # bytes a probe may ask us to take
PROBE_CHUNK = 64 * 1024
_cert = None


def _config(is_client: bool) -> QuicConfiguration:
    # no certificate check on either side: Dilation's Noise handshake in the stream authenticates the peer
    global _cert
    cfg = QuicConfiguration(is_client=is_client, alpn_protocols=[ALPN], verify_mode=ssl.CERT_NONE,
                            max_data=STREAM_WINDOW, max_stream_data=STREAM_WINDOW, idle_timeout=IDLE_TIMEOUT,
                            max_datagram_size=MAX_DATAGRAM)
    if not is_client:
        if _cert is None:
            _cert = _self_signed()
        cfg.certificate, cfg.private_key = _cert
    return cfg


def client_connection() -> QuicConnection:
    return QuicConnection(configuration=_config(True))


def server_connection(first_datagram: bytes) -> QuicConnection | None:
    """A server connection for a client's first datagram, or None if that is not a QUIC Initial."""
    try:
        header = pull_quic_header(Buffer(data=first_datagram), host_cid_length=8)
    except ValueError:
        return None
    if header.packet_type != QuicPacketType.INITIAL:
        return None
    return QuicConnection(configuration=_config(False), original_destination_connection_id=header.destination_cid)


def _self_signed():
    """A throwaway certificate: nobody checks it (Noise inside authenticates)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "burrow-dilation")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30)).sign(key, hashes.SHA256()))
    return cert, key


class StreamTransport:
    """What L2Protocol needs of an asyncio transport, over one QUIC stream."""

    def __init__(self, conn: QuicPath, stream_id: int):
        self._conn, self.stream_id = conn, stream_id
        self._paused_writing = False
        self._high = WRITE_HIGH_WATER

    def get_extra_info(self, name, default=None):
        return default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._high = high or WRITE_HIGH_WATER

    def write(self, data) -> None:
        c = self._conn
        if c.closed:
            return
        c.quic.send_stream_data(self.stream_id, data)
        c.transmit_soon()
        if not self._paused_writing and self.buffered() > self._high:
            self._paused_writing = True
            c.protocol.pause_writing()

    def buffered(self) -> int:
        stream = self._conn.quic._streams.get(self.stream_id)
        return len(stream.sender._buffer) if stream is not None else 0

    def check_resume(self) -> None:
        if self._paused_writing and self.buffered() <= self._high // 4:
            self._paused_writing = False
            self._conn.protocol.resume_writing()

    def pause_reading(self) -> None:
        self._conn.reading = False

    def resume_reading(self) -> None:
        self._conn.resume_reading()

    def abort(self) -> None:
        self._conn.close()

    close = abort


class ProbeSender:
    """The Leader's side of a rate probe: send `nbytes` on the stream; `result` is the bytes per second from
    the first byte written to the peer's count (None when the connection ended first)."""

    def __init__(self, nbytes: int):
        self._left = self.nbytes = nbytes
        self._loop = asyncio.get_running_loop()
        self.result: asyncio.Future = self._loop.create_future()
        self._answer = bytearray()
        self._paused = False
        self._started = 0.0
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._started = self._loop.time()
        transport.write(PROBE_MAGIC + self.nbytes.to_bytes(8, "big"))
        self._pump()

    def _pump(self) -> None:
        while self._left > 0 and not self._paused:  # bounded: nbytes in PROBE_CHUNK steps
            n = min(PROBE_CHUNK, self._left)
            self._left -= n
            self.transport.write(bytes(n))

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._pump()

    def data_received(self, data) -> None:
        self._answer += data
        if len(self._answer) >= 8 and not self.result.done():
            got = int.from_bytes(self._answer[:8], "big")
            elapsed = max(self._loop.time() - self._started, 1e-6)
            self.result.set_result(got / elapsed if got == self.nbytes else None)

    def connection_lost(self, exc) -> None:
        if not self.result.done():
            self.result.set_result(None)


class ProbeSink:
    """The Follower's side of a rate probe: count the bytes, answer with the count, and leave the closing to
    the prober. A length over PROBE_MAX ends the connection."""

    def __init__(self, stats: dict):
        self._stats = stats
        self._head = bytearray()
        self._want: int | None = None
        self._got = 0
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data) -> None:
        if self._want is None:
            self._head += data
            n = len(PROBE_MAGIC) + 8
            if len(self._head) < n:
                return
            self._want = int.from_bytes(self._head[len(PROBE_MAGIC):n], "big")
            data, self._head = self._head[n:], bytearray()
            if self._want > PROBE_MAX:
                self._stats["quic_probes_refused"] += 1
                self.transport.abort()
                return
        before, self._got = self._got, self._got + len(data)
        if before < self._want <= self._got:
            self._stats["quic_probes"] += 1
            self.transport.write(self._got.to_bytes(8, "big"))

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass

    def connection_lost(self, exc) -> None:
        pass


class QuicPath:
    """One QUIC connection on the shared socket, driven by hand (aioquic is sans-IO)."""

    def __init__(self, link, quic: QuicConnection, addr, make_protocol):
        self.link, self.quic, self.addr = link, quic, addr
        self._make_protocol = make_protocol  # (addr) -> L2Protocol, called once the stream exists
        self.protocol = None
        self.transport: StreamTransport | None = None
        self.closed = False
        self.reading = True
        self._held: list[bytes] = []
        self._timer: asyncio.TimerHandle | None = None
        self._transmit_scheduled = False
        self._loop = asyncio.get_running_loop()
        self.done = asyncio.Event()  # set once the connection is over

    def datagram(self, data: bytes) -> None:
        if not self.reading:
            if len(self._held) < MAX_HELD:
                self._held.append(data)
            return
        self.quic.receive_datagram(data, self.addr, self._loop.time())
        self._process(transmit=False)
        self.transmit_soon()  # once for the datagrams read in this turn (client/nat/disco.py drains the socket)

    def resume_reading(self) -> None:
        self.reading = True
        held, self._held = self._held, []
        now = self._loop.time()
        for data in held:
            self.quic.receive_datagram(data, self.addr, now)
        self._process()

    def is_other_connection(self, data: bytes) -> bool:
        """A server's view: `data` is a client Initial for another connection (the peer's next generation,
        while this one was lost without a CONNECTION_CLOSE reaching us)."""
        if self.quic.configuration.is_client or not data[0] & 0x80:  # short header: an established connection
            return False
        try:
            header = pull_quic_header(Buffer(data=data), host_cid_length=8)
        except ValueError:
            return False
        ours = {self.quic._original_destination_connection_id, *(c.cid for c in self.quic._host_cids)}
        return header.packet_type == QuicPacketType.INITIAL and header.destination_cid not in ours

    def _process(self, transmit: bool = True) -> None:
        while (ev := self.quic.next_event()) is not None:
            if isinstance(ev, HandshakeCompleted) and self.quic.configuration.is_client:
                self._stream_up(self.quic.get_next_available_stream_id())
            elif isinstance(ev, StreamDataReceived):
                if self.transport is None:
                    self._stream_up(ev.stream_id, ev.data)
                if ev.stream_id == self.transport.stream_id and ev.data and self.protocol is not None:
                    self._feed(ev.data)
                if ev.end_stream:
                    self.close()
            elif isinstance(ev, ConnectionTerminated):
                self._terminated()
                return
        if transmit:
            self.transmit()

    def _feed(self, data: bytes) -> None:
        """A writable copy: records are opened in place (one datagram's worth, unlike L2Protocol's 1 MiB
        receive buffers, which suit a TCP read but not a 1200-byte QUIC chunk)."""
        self.protocol.data_received(bytearray(data))

    def _stream_up(self, stream_id: int, first: bytes = b"") -> None:
        if self.transport is not None:
            return
        self.transport = StreamTransport(self, stream_id)
        if not self.quic.configuration.is_client and first.startswith(PROBE_MAGIC):
            self.protocol = ProbeSink(self.link.endpoint.stats)
        else:
            self.protocol = self._make_protocol(self.addr)
        if self.protocol is None:  # the generation is over
            self.close()
            return
        self.protocol.connection_made(self.transport)

    def transmit_soon(self) -> None:
        if not self._transmit_scheduled:
            self._transmit_scheduled = True
            self._loop.call_soon(self.transmit)

    def transmit(self) -> None:
        self._transmit_scheduled = False
        if self.closed:  # a transmit_soon that outlived the connection
            return
        for data, addr in self.quic.datagrams_to_send(self._loop.time()):
            self.link.endpoint.sendto(data, addr)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        at = self.quic.get_timer()
        if at is not None:
            self._timer = self._loop.call_at(at, self._on_timer)
        if self.transport is not None:
            self.transport.check_resume()

    def _on_timer(self) -> None:
        self._timer = None
        self.quic.handle_timer(self._loop.time())
        self._process()

    def close(self) -> None:
        if self.closed:
            return
        self.quic.close()
        self.transmit()
        self._terminated()

    def _terminated(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        first = not self.closed
        self.closed = True
        self.done.set()
        self.link.forget(self)
        if first and self.protocol is not None:
            self.protocol.connection_lost(None)


