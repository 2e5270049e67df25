"""Sans-IO mailbox client: the rendezvous half of magic-wormhole's client protocol.

in:  connection_made(), connection_lost(), receive(text) from the WebSocket; API calls allocate(),
     claim(nameplate), add(phase, body), list_nameplates(), close(mood).
out: `take_outgoing()` -> JSON texts to send; `take_events()` -> event dataclasses below.
states: per connection (bound / claim sent / open sent ...) is reset on every reconnect; what
     survives is the nameplate, mailbox, the pending (un-echoed) adds and a pending release/close,
     which are replayed after the next `bind` with the same side, as magic-wormhole 0.24 does.

Peer messages are deduplicated by phase (the server never dedupes); our own echoed messages dequeue
the pending add of that phase. The nameplate is released as soon as the peer's first message arrives.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

MAX_PENDING_ADDS = 1024  # phases we keep for replay; an app sending more is misbehaving


class MailboxProtocolError(Exception):
    """The server sent something we cannot parse (the connection is dropped and retried)."""


# --- outgoing messages -------------------------------------------------------------------------


def _msg_id() -> str:
    return os.urandom(2).hex()


@dataclass(frozen=True)
class ClientMessage:
    """A client->server message; `fields` holds everything but type and id."""

    type: str
    fields: dict = field(default_factory=dict)
    id: str = field(default_factory=_msg_id)

    def encode(self) -> str:
        return json.dumps({**self.fields, "type": self.type, "id": self.id})

    @classmethod
    def decode(cls, text: str) -> ClientMessage:
        d = json.loads(text)
        mtype, mid = d.pop("type"), d.pop("id", "")
        return cls(mtype, d, mid)


# --- events ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Welcome:
    welcome: dict


@dataclass(frozen=True)
class Allocated:
    nameplate: str


@dataclass(frozen=True)
class Nameplates:
    nameplates: list


@dataclass(frozen=True)
class PeerMessage:
    side: str
    phase: str
    body: bytes


@dataclass(frozen=True)
class ServerErrorEvent:
    error: str
    orig: dict


@dataclass(frozen=True)
class MailboxClosed:
    """The close (and release, if any) was acknowledged: the session is over."""

    mood: str


# --- the state machine -------------------------------------------------------------------------


class MailboxClient:
    def __init__(self, appid: str, side: str, client_version: tuple[str, str] = ("burrow", "0.1.0")):
        self.appid, self.side, self.client_version = appid, side, client_version
        self.connected = False
        self._out: list[str] = []
        self._events: list = []
        # durable state (survives reconnects)
        self.allocate_wanted = False
        self.nameplate: str | None = None
        self.claimed = False  # the server acknowledged our claim
        self.release_wanted = False
        self.released = False
        self.mailbox: str | None = None
        self.pending: dict[str, bytes] = {}  # phase -> body, ours, not yet echoed
        self.processed: set[str] = set()  # peer phases already delivered
        self.close_mood: str | None = None
        self.closed = False
        self.peer_seen = False

    # -- outputs
    def take_outgoing(self) -> list[str]:
        out, self._out = self._out, []
        return out

    def take_events(self) -> list:
        ev, self._events = self._events, []
        return ev

    def _tx(self, mtype: str, **fields) -> None:
        if self.connected:
            self._out.append(ClientMessage(mtype, fields).encode())

    # -- connection lifecycle
    def connection_made(self) -> None:
        self.connected = True
        self._out.clear()  # anything unsent belongs to the old connection; durable state is replayed below
        self._tx("bind", appid=self.appid, side=self.side, client_version=list(self.client_version))
        if self.allocate_wanted and self.nameplate is None:
            self._tx("allocate")
        if self.nameplate is not None and not self.claimed and not self.release_wanted:
            self._tx("claim", nameplate=self.nameplate)
        if self.release_wanted and not self.released:
            self._tx("release", nameplate=self.nameplate)
        if self.mailbox is not None:
            self._tx("open", mailbox=self.mailbox)
            for phase, body in self.pending.items():
                self._tx("add", phase=phase, body=body.hex())
            if self.close_mood is not None and not self.closed:
                self._tx("close", mailbox=self.mailbox, mood=self.close_mood)

    def connection_lost(self) -> None:
        self.connected = False
        self._out.clear()

    # -- API
    def allocate(self) -> None:
        self.allocate_wanted = True
        self._tx("allocate")

    def list_nameplates(self) -> None:
        self._tx("list")

    def claim(self, nameplate: str) -> None:
        if self.nameplate is not None:
            raise MailboxProtocolError("a nameplate was already chosen")
        self.nameplate = nameplate
        self._tx("claim", nameplate=nameplate)

    def add(self, phase: str, body: bytes) -> None:
        if len(self.pending) >= MAX_PENDING_ADDS:
            raise MailboxProtocolError("too many unacknowledged messages")
        self.pending[phase] = body
        if self.mailbox is not None:
            self._tx("add", phase=phase, body=body.hex())

    def release(self) -> None:
        if self.nameplate is None or self.release_wanted:
            return
        self.release_wanted = True
        self._tx("release", nameplate=self.nameplate)

    def close(self, mood: str) -> None:
        """Release the nameplate and close the mailbox; MailboxClosed follows the acks."""
        if self.close_mood is not None:
            return
        self.close_mood = mood
        if self.nameplate is not None and not self.release_wanted and self.claimed:
            self.release()
        if self.mailbox is not None:
            self._tx("close", mailbox=self.mailbox, mood=mood)
        elif self.nameplate is None or not self.connected:
            self.closed = True  # nothing was opened on the server (or it is unreachable)
            self._maybe_done()
        # else: the claim is in flight; _rx_claimed releases and closes

    def _maybe_done(self) -> None:
        if self.closed and (not self.release_wanted or self.released or self.mailbox is None):
            self._events.append(MailboxClosed(self.close_mood or "happy"))

    # -- input
    def receive(self, text: str | bytes) -> None:
        try:
            msg = json.loads(text)
            mtype = msg["type"]
        except (ValueError, KeyError, TypeError) as e:
            raise MailboxProtocolError(f"unparseable server message: {text[:80]!r}") from e
        if not isinstance(msg, dict):
            raise MailboxProtocolError("server message is not a JSON object")
        handler = getattr(self, "_rx_" + str(mtype), None)
        if handler is not None:
            try:
                handler(msg)
            except (KeyError, TypeError, ValueError) as e:
                raise MailboxProtocolError(f"malformed {mtype!r} message") from e
        # unknown types (ack, pong, future ones) are ignored, as magic-wormhole does

    def _rx_welcome(self, msg: dict) -> None:
        self._events.append(Welcome(dict(msg["welcome"])))

    def _rx_error(self, msg: dict) -> None:
        self._events.append(ServerErrorEvent(str(msg.get("error")), msg.get("orig") or {}))

    def _rx_nameplates(self, msg: dict) -> None:
        self._events.append(Nameplates([str(n["id"]) for n in msg["nameplates"]]))

    def _rx_allocated(self, msg: dict) -> None:
        if self.nameplate is not None:
            return  # a replayed allocate after reconnect: keep the first
        nameplate = str(msg["nameplate"])
        self.nameplate = nameplate
        self.claimed = False
        self._tx("claim", nameplate=nameplate)  # allocate also claims server-side; this is idempotent
        self._events.append(Allocated(nameplate))

    def _rx_claimed(self, msg: dict) -> None:
        self.claimed = True
        mailbox = str(msg["mailbox"])
        if self.mailbox is None:
            self.mailbox = mailbox
            self._tx("open", mailbox=mailbox)
            for phase, body in self.pending.items():
                self._tx("add", phase=phase, body=body.hex())
            if self.close_mood is not None:
                self.release()
                self._tx("close", mailbox=mailbox, mood=self.close_mood)

    def _rx_released(self, msg: dict) -> None:
        self.released = True
        self._maybe_done()

    def _rx_closed(self, msg: dict) -> None:
        self.closed = True
        self._maybe_done()

    def _rx_message(self, msg: dict) -> None:
        side, phase = str(msg["side"]), str(msg["phase"])
        body = bytes.fromhex(msg["body"])
        if side == self.side:
            self.pending.pop(phase, None)  # our echo: the server has stored it
            return
        if not self.peer_seen:
            self.peer_seen = True
            self.release()
        if phase in self.processed:
            return
        self.processed.add(phase)
        self._events.append(PeerMessage(side, phase, body))
