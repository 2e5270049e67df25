"""One iroh relay connection as a sans-IO state machine.

in:  `start(now)`, `receive(message, now)` for each WebSocket binary message, `tick(now)`,
     `accept()` / `deny(reason)` after the server's access check
out: lists of frames (bytes) to send, plus events: Authenticated, Forward, Closed
states: challenged -> checking (signature good, access check running) -> active -> closed

Liveness as the upstream relay does it: ping every `ping_interval` (+ `jitter()` seconds, drawn by
the caller's function), reset by any inbound frame; no Pong within `pong_timeout` closes the
connection. `next_deadline()` tells the adapter when `tick` has something to do, so an idle
connection costs one timer, not one per second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nacl.exceptions import BadSignatureError
from nacl.exceptions import ValueError as NaclValueError
from nacl.signing import VerifyKey

from burrow.wire.iroh import frames as f
from burrow.wire.iroh.handshake import SUBPROTOCOLS, challenge_message


@dataclass(frozen=True)
class Authenticated:
    endpoint_id: bytes


@dataclass(frozen=True)
class Forward:
    """A client's datagram(s) for `dst`; `frame` is already rewritten as the relay delivers it."""
    dst: bytes
    frame: bytes
    packets: int
    payload_bytes: int


@dataclass(frozen=True)
class Closed:
    reason: str  # "protocol", "denied", "timeout"
    detail: str


@dataclass
class Output:
    send: list[bytes] = field(default_factory=list)
    events: list[object] = field(default_factory=list)


class IrohSession:
    __slots__ = ("version", "challenge", "ping_interval", "pong_timeout", "jitter", "_interval", "state",
                 "login", "endpoint_id", "_last_rx", "_ping_due", "_awaiting_pong", "_pong_deadline",
                 "_ping_counter")

    def __init__(self, version: str, challenge: bytes, *, ping_interval: float = 15.0,
                 pong_timeout: float = 5.0, jitter: Callable[[], float] = lambda: 0.0) -> None:
        if version not in SUBPROTOCOLS:
            raise ValueError(f"unknown iroh relay version {version!r}")
        self.version = version
        self.challenge = challenge
        self.ping_interval = ping_interval
        self.pong_timeout = pong_timeout
        self.jitter = jitter
        self._interval = ping_interval + jitter()  # redrawn after every server ping
        self.state = "challenged"
        self.login = "challenge"  # or "key_material" after a valid header login
        self.endpoint_id: bytes | None = None
        self._last_rx = 0.0
        self._ping_due = 0.0
        self._awaiting_pong: bytes | None = None
        self._pong_deadline = 0.0
        self._ping_counter = 0

    # -- handshake -------------------------------------------------------------------------------
    def start(self, now: float) -> Output:
        self._last_rx = now
        self._ping_due = now + self._interval
        return Output(send=[f.ServerChallenge(self.challenge).encode()])

    def start_with_key_material(self, auth: f.KeyMaterialClientAuth, key_material: bytes | None,
                                now: float) -> Output:
        """Header login (TLS): `key_material` is this TLS session's exporter value for the claimed key
        (label "iroh-relay handshake v1", context = auth.public_key, 32 bytes), None if unavailable.

        Valid: authenticated without a challenge round trip (ServerConfirmsAuth follows accept()).
        Otherwise, as upstream does, fall back to the challenge.
        """
        if key_material is not None and len(key_material) == 32 and \
                key_material[16:] == auth.key_material_suffix:
            try:
                VerifyKey(auth.public_key).verify(key_material[:16], auth.signature)
            except (BadSignatureError, NaclValueError):
                pass
            else:
                self._last_rx = now
                self._ping_due = now + self._interval
                self.endpoint_id = auth.public_key
                self.state = "checking"
                self.login = "key_material"
                return Output(events=[Authenticated(auth.public_key)])
        return self.start(now)

    def accept(self) -> Output:
        """The access check allowed this endpoint."""
        if self.state != "checking":
            return Output()
        self.state = "active"
        return Output(send=[f.ServerConfirmsAuth().encode()])

    def deny(self, reason: str) -> Output:
        self.state = "closed"
        return Output(send=[f.ServerDeniesAuth(reason).encode()], events=[Closed("denied", reason)])

    def status_frame(self, code: int) -> bytes:
        """Status for v2 clients, the equivalent Health text for v1 (the other is a client error)."""
        if self.version == "iroh-relay-v2":
            return f.Status(code).encode()
        text = {f.STATUS_HEALTHY: "",
                f.STATUS_SAME_ENDPOINT_ID_CONNECTED: "Another endpoint connected with the same endpoint id."
                " No more messages will be received",
                f.STATUS_RATE_LIMITED: "Rate limited by the relay server"}.get(code, "")
        return f.Health(text).encode()

    def _fail(self, detail: str) -> Output:
        self.state = "closed"
        return Output(events=[Closed("protocol", detail)])

    # -- inbound ---------------------------------------------------------------------------------
    def receive(self, message: bytes, now: float) -> Output:
        if self.state == "closed":
            return Output()
        try:
            frame = f.decode(message)
        except f.IrohProtocolError as exc:
            return self._fail(str(exc))
        self._last_rx = now
        self._ping_due = now + self._interval
        if self.state == "challenged":
            if not isinstance(frame, f.ClientAuth):
                return self._fail("expected ClientAuth")
            try:
                VerifyKey(frame.public_key).verify(challenge_message(self.challenge), frame.signature)
            except (BadSignatureError, NaclValueError):
                self.state = "closed"
                return Output(send=[f.ServerDeniesAuth("signature invalid").encode()],
                              events=[Closed("denied", "signature invalid")])
            self.endpoint_id = frame.public_key
            self.state = "checking"
            return Output(events=[Authenticated(frame.public_key)])
        if self.state == "checking":
            return self._fail("frame before the relay confirmed authentication")
        if isinstance(frame, f.Datagrams):
            if frame.frame_type not in (f.CLIENT_TO_RELAY_DATAGRAM, f.CLIENT_TO_RELAY_DATAGRAM_BATCH):
                return self._fail("clients may not send relay-to-client datagrams")
            assert self.endpoint_id is not None
            return Output(events=[Forward(frame.peer, frame.delivered_from(self.endpoint_id).encode(),
                                          _count_packets(frame), frame.payload_len)])
        if isinstance(frame, f.Ping):
            return Output(send=[f.Pong(frame.data).encode()])
        if isinstance(frame, f.Pong):
            if frame.data == self._awaiting_pong:
                self._awaiting_pong = None
            return Output()
        return self._fail(f"unexpected frame {type(frame).__name__} from a client")

    def forward(self, message: bytes, now: float) -> tuple[bytes, bytes, int] | None:
        """Fast path for an active session's datagram frame (type 4 or 5, checked by the caller).

        Returns (destination id, body after the id, payload bytes) without building frame objects,
        or None when the frame is malformed (the session is then closed: call `receive` for the
        Closed event's detail, or treat it as a protocol error).
        """
        n = len(message)
        batch = message[0] == f.CLIENT_TO_RELAY_DATAGRAM_BATCH
        header = 1 + f.KEY_LEN + (3 if batch else 1)
        if n < header or n - header > f.MAX_PACKET_SIZE:
            self.state = "closed"
            return None
        self._last_rx = now
        self._ping_due = now + self._interval
        return message[1:33], message[33:], n - header

    def next_deadline(self) -> float | None:
        """When `tick` may next have work: the pong deadline or the next ping; None when idle."""
        if self.state != "active":
            return None
        return self._pong_deadline if self._awaiting_pong is not None else self._ping_due

    # -- timers ----------------------------------------------------------------------------------
    def tick(self, now: float) -> Output:
        """Call at least every second; returns a Ping to send or a timeout close."""
        if self.state != "active":
            return Output()
        if self._awaiting_pong is not None and now >= self._pong_deadline:
            self.state = "closed"
            return Output(events=[Closed("timeout", "no pong")])
        if self._awaiting_pong is None and now >= self._ping_due:
            self._ping_counter += 1
            data = self._ping_counter.to_bytes(8, "big")
            self._awaiting_pong = data
            self._pong_deadline = now + self.pong_timeout
            self._interval = self.ping_interval + self.jitter()
            self._ping_due = now + self._interval
            return Output(send=[f.Ping(data).encode()])
        return Output()


def _count_packets(frame: f.Datagrams) -> int:
    if frame.frame_type != f.CLIENT_TO_RELAY_DATAGRAM_BATCH:
        return 1
    segment = int.from_bytes(frame.body[1:3], "big")
    data_len = len(frame.body) - 3
    if segment == 0:
        return 1
    return max(1, -(-data_len // segment))
