"""Per-connection DERP state machines, sans-IO (the clock is an argument).

ServerConnection
  in:  bytes from the client (any chunking), the current time
  out: bytes to send before the handshake (ServerKey, ServerInfo) and events afterwards
  states: handshake -> verifying (ClientInfo opened, access check running) -> established -> closed
ClientConnection
  in:  bytes from the server
  out: bytes to send (ClientInfo, Pong) and events (Connected, RecvPacket, PeerGone, Restarting, ...)
  states: await_server_key -> await_server_info -> established -> closed

After a ProtocolError the machine is terminal: every later call raises the same error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from . import frames as f
from .handshake import (
    ClientInfoJSON,
    ServerInfoJSON,
    make_client_info,
    make_server_info,
    open_client_info,
    open_server_info,
    public_key,
)

_MAX_HEADS = 64  # RecvPacket headers kept per connection, one per payload length seen (a tunnel uses a few)


class ByteRate(Protocol):
    """The per-connection byte budget the server passes in (common.limits.TokenBucket has this shape)."""

    rate: float
    burst: float
    tokens: float

    def take(self, amount: float, now: float) -> bool: ...


@dataclass(frozen=True, slots=True)
class ClientHello:
    """ClientInfo opened: the adapter checks access, then calls accept() or deny()."""

    key: bytes
    info: ClientInfoJSON


@dataclass(frozen=True, slots=True)
class Throttled:
    """The byte-rate limit is spent: stop reading for `wait` seconds, then call receive_data(b"")."""

    wait: float


@dataclass(frozen=True, slots=True)
class Forwarded:
    """ForwardPackets from a peer relay (with `recv_frames` on), already turned into the RecvPacket frames
    their receivers get: destination key -> frames in arrival order. One event per run of consecutive
    ForwardPackets, so any other frame keeps its place between them."""

    frames: dict[bytes, list[bytes]]
    packets: int


@dataclass(frozen=True, slots=True)
class ForwardedBatch:
    """One ForwardBatch from a peer relay (with `forward_batch` on): `packets` whole RecvPacket frames for
    `dst`, concatenated in `data`, carrying `nbytes` of payload."""

    dst: bytes
    data: bytes
    packets: int
    nbytes: int


@dataclass(frozen=True, slots=True)
class Sends:
    """SendPackets from the client (with `send_frames` on), already turned into the RecvPacket frames their
    receivers get (the client's key as source): destination key -> frames in arrival order. One event
    per run of consecutive SendPackets, so any other frame keeps its place between them."""

    frames: dict[bytes, list[bytes]]
    packets: int


@dataclass(frozen=True, slots=True)
class Connected:
    server_key: bytes
    info: ServerInfoJSON


class ServerConnection:
    __slots__ = ("server_private", "server_public", "state", "deadline", "decoder", "client_key",
                 "max_frame_len", "rate", "unknown_frames", "mesh_extensions", "recv_frames", "send_frames",
                 "forward_batch", "_error", "_recv_heads")

    def __init__(self, server_private: bytes, now: float, *, handshake_timeout: float = 10.0,
                 max_frame_len: int = f.MAX_PACKET_SIZE + 2 * f.KEY_LEN,
                 max_client_info_len: int = f.MAX_CLIENT_INFO_LEN,
                 rate: ByteRate | None = None, server_public: bytes | None = None) -> None:
        self.server_private = server_private
        self.server_public = server_public or public_key(server_private)
        self.state = "handshake"
        self.deadline = now + handshake_timeout
        self.decoder = f.FrameDecoder(max_client_info_len)
        self.max_frame_len = max_frame_len
        self.client_key: bytes | None = None
        self.rate = rate
        self.unknown_frames = 0
        self.mesh_extensions = False  # set for a peer relay: burrow's ForwardIroh is decoded, not skipped
        self.recv_frames = False      # set for a peer relay: ForwardPackets come as Forwarded RecvPacket frames
        self.send_frames = False      # SendPackets come as Sends of RecvPacket frames rather than one by one
        self.forward_batch = False    # set for a peer relay told (ServerInfo) that it may send ForwardBatch
        self._recv_heads: dict[int, bytes] = {}  # see _frames
        self._error: f.ProtocolError | None = None

    def greeting(self) -> bytes:
        """The server speaks first: ServerKey."""
        return f.ServerKey(self.server_public).encode()

    def handshake_expired(self, now: float) -> bool:
        return self.state in ("handshake", "verifying") and now >= self.deadline

    def accept(self, info: ServerInfoJSON | None = None) -> bytes:
        if self.state != "verifying" or self.client_key is None:
            raise f.HandshakeError("accept() outside of verification")
        self.state = "established"
        self.decoder.max_frame_len = self.max_frame_len
        return make_server_info(self.server_private, self.client_key, info or ServerInfoJSON()).encode()

    def deny(self) -> None:
        self.state = "closed"

    def close(self) -> None:
        self.state = "closed"

    def _fail(self, exc: f.ProtocolError) -> f.ProtocolError:
        self._error = exc
        self.state = "closed"
        return exc

    def receive_data(self, data: bytes, now: float) -> list:
        if self._error is not None:
            raise self._error
        if self.state == "closed":
            return []
        try:
            if data:
                self.decoder.feed(data)
            if self.state == "handshake":
                return self._handshake()
            if self.state == "verifying":
                return []
            return self._frames(now)
        except f.ProtocolError as exc:
            raise self._fail(exc) from None

    def _handshake(self) -> list:
        raw = self.decoder.next_raw()
        if raw is None:
            return []
        ftype, payload = raw
        if ftype != f.CLIENT_INFO:
            raise f.HandshakeError(f"first frame must be ClientInfo, got type {ftype:#x}")
        frame = f.ClientInfo.decode(payload)
        info = open_client_info(self.server_private, frame)
        self.client_key = frame.key
        self.state = "verifying"
        return [ClientHello(frame.key, info)]

    def _frames(self, now: float) -> list:
        """Every complete frame in the buffer. The packet frames are cut straight out of the decoder's
        buffer (one copy each of key and payload) and built as tuples: this loop runs once per relayed
        packet. A frame the byte budget cannot pay for stays in the buffer for the next call. With
        `recv_frames`, a run of ForwardPackets becomes one Forwarded event of ready RecvPacket frames; with
        `send_frames`, a run of SendPackets one Sends event of them."""
        events: list = []
        append = events.append
        decoder, rate = self.decoder, self.rate
        max_len = decoder.max_frame_len
        new, send_packet, forward_packet = tuple.__new__, f.SendPacket, f.ForwardPacket
        unpack, hdr, key = f._HEADER.unpack_from, f.FRAME_HEADER_LEN, f.KEY_LEN
        buf, pos = decoder._buf, decoder._pos
        n = len(buf)
        view = memoryview(buf)
        recv_frames, join, pack = self.recv_frames, b"".join, f._HEADER.pack
        send_frames, src = self.send_frames, self.client_key
        SEND, FORWARD = f.SEND_PACKET, f.FORWARD_PACKET  # noqa: N806 (locals: this loop runs per packet)
        heads = self._recv_heads  # payload length -> RecvPacket header + our key: packet sizes repeat
        # the open run of ForwardPackets (Forwarded) or SendPackets (Sends): its frames, whose event goes at run_at
        batch: dict | None = None
        run: type = Forwarded
        batched = run_at = 0
        # the Sends run and receiver of the last SendPacket: the next one to the same receiver goes straight on
        last_batch: dict | None = {}
        last_dst, last_frames = b"", []
        try:
            while n - pos >= hdr:
                ftype, length = unpack(buf, pos)
                if length > max_len:
                    raise f.FrameTooLarge(f"frame type {ftype:#x} of {length} bytes exceeds {max_len}")
                body, end = pos + hdr, pos + hdr + length
                if end > n:
                    break
                if rate is not None:
                    cost = min(max(length, 1), rate.burst)
                    if not rate.take(cost, now):
                        append(Throttled(max((cost - rate.tokens) / rate.rate, 0.001)))
                        break
                if ftype == SEND:  # the hot path
                    if length < key:
                        raise f.MalformedFrame("SendPacket: shorter than a key")
                    if not send_frames:
                        if batch is not None:
                            events[run_at], batch = run(batch, batched), None
                        append(new(send_packet, (bytes(view[body:body + key]), bytes(view[body + key:end]))))
                        pos = end
                        continue
                    # our key + payload under a RecvPacket header: the payload is copied once
                    head = heads.get(length)
                    if head is None:
                        if len(heads) >= _MAX_HEADS:
                            heads.clear()
                        head = heads[length] = pack(f.RECV_PACKET, length) + src
                    frame = head + view[body + key:end]
                    if batch is last_batch and buf.startswith(last_dst, body):  # same run and receiver
                        last_frames.append(frame)
                        batched += 1
                        pos = end
                        continue
                    dst, kind = bytes(view[body:body + key]), Sends
                elif ftype == FORWARD:  # the mesh's hot path
                    if length < 2 * key:
                        raise f.MalformedFrame("ForwardPacket: shorter than two keys")
                    if not recv_frames:
                        if batch is not None:
                            events[run_at], batch = run(batch, batched), None
                        append(new(forward_packet, (bytes(view[body:body + key]), bytes(view[body + key:body + 2 * key]),
                                                    bytes(view[body + 2 * key:end]))))
                        pos = end
                        continue
                    # src + payload under a RecvPacket header: the payload is copied once
                    frame = join((pack(f.RECV_PACKET, length - key), view[body:body + key], view[body + 2 * key:end]))
                    dst, kind = bytes(view[body + key:body + 2 * key]), Forwarded
                elif ftype == f.FORWARD_BATCH and self.forward_batch:
                    if batch is not None:
                        events[run_at], batch = run(batch, batched), None
                    if length < key + 4:
                        raise f.MalformedFrame("ForwardBatch: shorter than a key and a count")
                    count = int.from_bytes(view[body + key:body + key + 4], "big")
                    nbytes = f.check_forward_batch(buf, body + key + 4, end, count)
                    append(ForwardedBatch(bytes(view[body:body + key]), bytes(view[body + key + 4:end]), count, nbytes))
                    pos = end
                    continue
                else:
                    if batch is not None:
                        events[run_at], batch = run(batch, batched), None
                    self._control(ftype, bytes(view[body:end]), append)
                    pos = end
                    continue
                if batch is None or run is not kind:  # a new run: its event goes here, built when it ends
                    if batch is not None:
                        events[run_at] = run(batch, batched)
                    batch, run, batched, run_at = {dst: [frame]}, kind, 1, len(events)
                    append(None)
                else:
                    frames = batch.get(dst)
                    if frames is None:
                        batch[dst] = [frame]
                    else:
                        frames.append(frame)
                    batched += 1
                if kind is Sends:
                    last_batch, last_dst, last_frames = batch, dst, batch[dst]
                pos = end
        finally:
            view.release()
            decoder.consume_to(pos)
            if batch is not None:
                events[run_at] = run(batch, batched)
        return events

    def _control(self, ftype: int, payload: bytes, append) -> None:
        if ftype == f.NOTE_PREFERRED:
            append(f.NotePreferred.decode(payload))
        elif ftype == f.PING:
            append(f.Ping.decode(payload))
        elif ftype == f.PONG:
            append(f.Pong.decode(payload))
        elif ftype == f.WATCH_CONNS:
            append(f.WatchConns.decode(payload))
        elif ftype == f.FORWARD_IROH and self.mesh_extensions:
            append(f.ForwardIroh.decode(payload))
        elif ftype == f.CLOSE_PEER:
            append(f.ClosePeer.decode(payload))
        elif ftype == f.CLIENT_INFO:
            raise f.HandshakeError("ClientInfo sent twice")
        else:
            self.unknown_frames += 1  # skipped, as derper does: newer clients may send more


class ClientConnection:
    __slots__ = ("client_private", "client_public", "server_key", "info", "state", "decoder",
                 "_out", "_error", "unknown_frames")

    def __init__(self, client_private: bytes, *, info: ClientInfoJSON | None = None,
                 server_key: bytes | None = None, max_frame_len: int = f.MAX_CLIENT_FRAME_LEN) -> None:
        """With `server_key` known in advance (fast start), ClientInfo goes out at once."""
        self.client_private = client_private
        self.client_public = public_key(client_private)
        self.info = info or ClientInfoJSON()
        self.server_key = server_key
        self.decoder = f.FrameDecoder(max_frame_len)
        self._out: list[bytes] = []
        self._error: f.ProtocolError | None = None
        self.unknown_frames = 0
        self.state = "await_server_key"
        if server_key is not None:
            self._out.append(make_client_info(client_private, server_key, self.info).encode())
            self.state = "await_server_info"

    def data_to_send(self) -> bytes:
        out, self._out = b"".join(self._out), []
        return out

    def send_packet(self, dst: bytes, payload: bytes) -> bytes:
        if len(dst) != f.KEY_LEN:
            raise ValueError("destination key must be 32 bytes")
        if len(payload) > f.MAX_PACKET_SIZE:
            raise ValueError("packet larger than 64 KiB")
        return f.header(f.SEND_PACKET, f.KEY_LEN + len(payload)) + dst + payload

    def receive_data(self, data: bytes) -> list:
        if self._error is not None:
            raise self._error
        try:
            self.decoder.feed(data)
            return self._frames()
        except f.ProtocolError as exc:
            self._error = exc
            self.state = "closed"
            raise

    def _frames(self) -> list:
        events: list = []
        while True:
            raw = self.decoder.next_raw()
            if raw is None:
                return events
            ftype, payload = raw
            if self.state == "await_server_key":
                if ftype != f.SERVER_KEY:
                    raise f.HandshakeError(f"expected ServerKey, got type {ftype:#x}")
                self.server_key = f.ServerKey.decode(payload).key
                self._out.append(make_client_info(self.client_private, self.server_key, self.info).encode())
                self.state = "await_server_info"
                continue
            if ftype == f.SERVER_KEY:
                continue  # fast start: the server still sends it; nothing to learn
            if self.state == "await_server_info":
                if ftype == f.HEALTH:  # a refusal (access denied) comes as Health before any ServerInfo
                    raise f.HandshakeError(f"relay refused: {f.Health.decode(payload).problem}")
                if ftype != f.SERVER_INFO:
                    raise f.HandshakeError(f"expected ServerInfo, got type {ftype:#x}")
                assert self.server_key is not None
                info = open_server_info(self.client_private, self.server_key, f.ServerInfo.decode(payload))
                self.state = "established"
                events.append(Connected(self.server_key, info))
                continue
            frame = f.decode_frame(ftype, payload)
            if isinstance(frame, f.UnknownFrame):
                self.unknown_frames += 1
                continue
            if isinstance(frame, f.Ping) and self.info.can_ack_pings:
                self._out.append(f.Pong(frame.data).encode())
            events.append(frame)
