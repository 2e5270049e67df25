"""The mailbox protocol state machine, sans-IO.

in:  `connect(now, address)`, `receive(session, payload, now)`, `complete(request, result)`,
     `deliver(delivery)`, `mailbox_gone(app, mailbox)`, `disconnect(session, now)`, `prune(now, expiry)`
out: lists of `Send(session, msg)` / `Drop(session, reason, text)` / `Usage(event, fields)` /
     `Request(session, op)`.
states per connection: unbound -> bound (appid, side) with once-only claim/release/open/close flags.

The core keeps what belongs to one connection: bind, the once-per-connection rules, the message rate,
and which connections are subscribed to which mailbox. What connections share (nameplates, mailboxes,
messages) lives in a channel store the core asks with a `Request` (ops.py) and hears back from through
`complete`. While a connection's request is out, its next frames wait in order and deliveries for it are
held, so replies keep the reference's order: the ack first, then what the message caused. A store may
answer at once (single node) or later (Redis); the core works the same either way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import messages as m
from .limits import Limits
from .ops import (
    Add,
    Allocate,
    Claim,
    Close,
    Delivery,
    ListNames,
    Op,
    Open,
    Prune,
    Release,
    Result,
)
from .outputs import Drop, Output, Request, Send, Session, Usage

# Frames a connection may send while one of its requests is out (a client sends a handful at most).
MAX_QUEUED_FRAMES = 64
MAX_QUEUED_BYTES = 4 << 20


@dataclass(slots=True)
class Pending:
    """A connection's request in flight: the message that caused it and the replies that precede the result."""
    op: Op
    msg: dict[str, Any]
    prefix: list[Output]


class MailboxCore:
    def __init__(self, limits: Limits | None = None, welcome: dict[str, Any] | None = None,
                 allow_list: bool = True) -> None:
        self.limits = limits or Limits()
        self.welcome = dict(welcome or {})
        self.allow_list = allow_list
        self.sessions: set[Session] = set()
        # (app, mailbox) -> connections subscribed to it, or opening it (their `open` is in flight)
        self.subscribers: dict[tuple[str, str], set[Session]] = {}
        # counters read by the metrics collector
        self.messages_total = 0
        self.errors: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()
        self.moods: Counter[str] = Counter()

    # ---- connection life cycle -------------------------------------------------------------
    def connect(self, now: float, address: dict[str, Any] | None = None) -> tuple[Session, list[Output]]:
        s = Session(started=now, bucket_tokens=self.limits.burst_messages, bucket_stamp=now)
        self.sessions.add(s)
        info = dict(self.welcome)
        if address is not None:
            info["your-address"] = address
        return s, [Send(s, m.welcome(info))]

    def disconnect(self, s: Session, now: float) -> None:
        if s.app is not None and (s.subscribed is not None or isinstance(s.pending and s.pending.op, Open)):
            self._unsubscribe(s, s.subscribed or s.pending.op.mailbox)
        s.closed = True
        s.queued.clear()
        s.held.clear()
        self.sessions.discard(s)

    def bind_timed_out(self, s: Session) -> list[Output]:
        if s.closed or s.app is not None:
            return []
        self.refusals["bind_deadline"] += 1
        return [Send(s, m.error(m.BIND_TIMEOUT, None)), Drop(s, "timeout", m.BIND_TIMEOUT)]

    # ---- inbound ----------------------------------------------------------------------------
    def receive(self, s: Session, payload: bytes | str, now: float) -> list[Output]:
        if s.closed:
            return []
        if s.pending is not None:
            s.queued.append((payload, now))
            s.queued_bytes += len(payload)
            if len(s.queued) <= MAX_QUEUED_FRAMES and s.queued_bytes <= MAX_QUEUED_BYTES:
                return []
            self.refusals["message_rate"] += 1
            out: list[Output] = []
            self._error(s, m.TOO_FAST, None, out)
            out.append(Drop(s, "limit", m.TOO_FAST))
            s.closed = True
            return out
        return self._receive(s, payload, now)

    def _receive(self, s: Session, payload: bytes | str, now: float) -> list[Output]:
        s.messages_in += 1
        out: list[Output] = []
        msg: Any = None
        try:
            if 0 < self.limits.max_message_bytes and len(payload) > self.limits.max_frame_bytes:
                self.refusals["message_bytes"] += 1
                raise m.FatalProtocolError(m.TOO_LARGE)
            msg = m.parse_frame(payload)
            if "type" not in msg:
                raise m.ProtocolError(m.MISSING_TYPE)
            out.append(Send(s, m.ack(msg.get("id"))))
            if not self._rate_ok(s, now):
                self.refusals["message_rate"] += 1
                raise m.FatalProtocolError(m.TOO_FAST)
            op = self._dispatch(s, msg, now, out)
            if op is not None:
                s.pending = Pending(op, msg, out)
                return [Request(s, op)]
        except m.FatalProtocolError as e:
            self._fatal(s, e.text, msg, out)
        except m.ProtocolError as e:
            self._error(s, e.text, msg, out)
        return out

    def _fatal(self, s: Session, text: str, orig: Any, out: list[Output]) -> None:
        self._error(s, text, orig, out)
        out.append(Drop(s, "limit" if text in (m.TOO_FAST, m.TOO_LARGE) else "protocol", text))
        s.closed = True

    def _error(self, s: Session, text: str, orig: Any, out: list[Output]) -> None:
        s.errors += 1
        self.errors[text] += 1
        out.append(Send(s, m.error(text, orig)))

    def _rate_ok(self, s: Session, now: float) -> bool:
        lim = self.limits
        if lim.messages_per_second <= 0:
            return True
        s.bucket_tokens = min(lim.burst_messages, s.bucket_tokens + (now - s.bucket_stamp) * lim.messages_per_second)
        s.bucket_stamp = now
        if s.bucket_tokens < 1:
            return False
        s.bucket_tokens -= 1
        return True

    def _dispatch(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> Op | None:
        mtype = msg["type"]
        if mtype == "ping":
            if "ping" not in msg:
                raise m.ProtocolError(m.PING_REQUIRES)
            out.append(Send(s, {"type": "pong", "pong": msg["ping"]}))
            return None
        if mtype == "bind":
            if s.app is not None:
                raise m.ProtocolError(m.ALREADY_BOUND)
            b = m.Bind.decode(msg)
            s.app, s.side, s.client_impl, s.client_version = b.appid, b.side, b.client_impl, b.client_version
            return None
        if s.app is None:
            raise m.ProtocolError(m.MUST_BIND)
        handler = _HANDLERS.get(mtype)
        if handler is None:
            raise m.ProtocolError(m.UNKNOWN_TYPE)
        return handler(self, s, msg, now, out)

    # ---- requests: what each message asks of the store ---------------------------------------
    def _list(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> Op | None:
        if not self.allow_list:
            out.append(Send(s, {"type": "nameplates", "nameplates": []}))
            return None
        return ListNames(s.app, s.side, now)

    def _allocate(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> Op | None:
        if s.did_allocate:
            raise m.ProtocolError(m.GREEDY)
        return Allocate(s.app, s.side, now, frozenset(s.touched), self.limits.max_mailboxes_per_connection)

    def _claim(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> Op | None:
        c = m.Claim.decode(msg)
        if s.did_claim:
            raise m.ProtocolError(m.ONE_CLAIM)
        s.did_claim = True
        if not m.valid_nameplate(c.nameplate):
            raise m.FatalProtocolError(m.BAD_NAMEPLATE)
        s.nameplate = c.nameplate
        return Claim(s.app, s.side, now, c.nameplate, frozenset(s.touched), self.limits.max_mailboxes_per_connection)

    def _release(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> Op | None:
        if s.did_release:
            raise m.ProtocolError(m.ONE_RELEASE)
        r = m.Release.decode(msg)
        name = _named_or_current(r.given, r.nameplate, s.nameplate, m.RELEASE_SAME, m.RELEASE_FOLLOW)
        s.did_release = True
        if isinstance(name, str):
            return Release(s.app, s.side, now, name)
        out.append(Send(s, {"type": "released"}))
        return None

    def _open(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> Op | None:
        if s.subscribed is not None:
            raise m.ProtocolError(m.ONE_OPEN)
        o = m.Open.decode(msg)
        s.mailbox_id = o.mailbox
        # subscribe now: deliveries that race the replay are held and de-duplicated by number
        self.subscribers.setdefault((s.app, o.mailbox), set()).add(s)
        return Open(s.app, s.side, now, o.mailbox, frozenset(s.touched), self.limits.max_mailboxes_per_connection)

    def _add(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> Op | None:
        if s.subscribed is None:
            raise m.ProtocolError(m.MUST_OPEN)
        a = m.Add.decode(msg)
        if 0 < self.limits.max_message_bytes < len(a.body) + len(a.phase):
            self.refusals["message_bytes"] += 1
            raise m.ProtocolError(m.TOO_LARGE)
        return Add(s.app, s.side, now, s.subscribed, a.phase, a.body, a.msg_id)

    def _close(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> Op | None:
        if s.did_close:
            raise m.ProtocolError(m.ONE_CLOSE)
        c = m.Close.decode(msg)
        mailbox_id = _named_or_current(c.given, c.mailbox, s.mailbox_id, m.CLOSE_SAME, m.CLOSE_FOLLOW)
        if not isinstance(mailbox_id, str):
            raise m.FatalProtocolError(m.BAD_MAILBOX)
        if not m.text_ok(mailbox_id):
            raise m.FatalProtocolError(m.BAD_TEXT)
        subscribed = s.subscribed is not None
        if subscribed:
            self._unsubscribe(s, s.subscribed)
            s.did_close = True
        return Close(s.app, s.side, now, mailbox_id, c.mood, subscribed, frozenset(s.touched),
                     self.limits.max_mailboxes_per_connection)

    # ---- results ----------------------------------------------------------------------------
    def complete(self, req: Request, result: Result) -> list[Output]:
        """The store's answer to `req`: the replies it causes, then whatever the connection sent meanwhile."""
        out: list[Output] = []
        self._account(result, out)
        s = req.session
        if s is None:
            return out
        pending: Pending = s.pending
        s.pending = None
        op = pending.op
        if s.closed:
            if type(op) is Open:
                self._unsubscribe(s, op.mailbox)
            if result.delivery is not None:  # stored all the same: the other subscribers get it
                out.extend(self.deliver(result.delivery))
            return out
        out[:0] = pending.prefix
        if result.touched is not None:
            s.touched.add(result.touched)
        if result.error is not None:
            if result.refusal is not None:
                self.refusals[result.refusal] += 1
            if type(op) is Open:
                self._unsubscribe(s, op.mailbox)
            if result.fatal:
                self._fatal(s, result.error, pending.msg, out)
                return out
            self._error(s, result.error, pending.msg, out)
        else:
            kind = type(op)
            if kind is Add:
                self.messages_total += 1
            elif kind is Open:
                s.subscribed = op.mailbox
                s.next_index = len(result.replay)
                out.extend(Send(s, msg) for msg in result.replay)
            elif kind is ListNames:
                out.append(Send(s, {"type": "nameplates", "nameplates": [{"id": n} for n in result.value]}))
            elif kind is Allocate:
                s.did_allocate = True
                out.append(Send(s, {"type": "allocated", "nameplate": result.value}))
            elif kind is Claim:
                out.append(Send(s, {"type": "claimed", "mailbox": result.value}))
            elif kind is Release:
                out.append(Send(s, {"type": "released"}))
            elif kind is Close:
                s.did_close = True
                out.append(Send(s, {"type": "closed"}))
        if s.held:
            held, s.held = s.held, []
            for d in held:
                self._deliver_to(s, d, out)
        if result.delivery is not None:
            out.extend(self.deliver(result.delivery))
        while s.queued and s.pending is None and not s.closed:
            payload, now = s.queued.popleft()
            s.queued_bytes -= len(payload)
            out.extend(self._receive(s, payload, now))
        return out

    def _account(self, result: Result, out: list[Output]) -> None:
        for event, fields in result.usage:
            self.moods[fields["mood"] if event == "mailbox" else "nameplate:" + fields["mood"]] += 1
            out.append(Usage(event, fields))
        for app, mailbox in result.gone:
            self.mailbox_gone(app, mailbox)

    # ---- fan-out ----------------------------------------------------------------------------
    def deliver(self, d: Delivery) -> list[Output]:
        """A message the store added: to every subscriber of its mailbox that has not had that number."""
        subs = self.subscribers.get((d.app, d.mailbox))
        out: list[Output] = []
        if subs:
            for s in subs:
                if s.pending is not None:
                    s.held.append(d)
                else:
                    self._deliver_to(s, d, out)
        return out

    @staticmethod
    def _deliver_to(s: Session, d: Delivery, out: list[Output]) -> None:
        if s.subscribed == d.mailbox and d.index >= s.next_index:
            s.next_index = d.index + 1
            out.append(Send(s, d.msg, True))

    def mailbox_gone(self, app: str, mailbox: str) -> None:
        """The mailbox was deleted: its subscribers are no longer subscribed (as in the reference)."""
        for s in self.subscribers.pop((app, mailbox), ()):
            if s.subscribed == mailbox:
                s.subscribed = None

    def _unsubscribe(self, s: Session, mailbox: str) -> None:
        key = (s.app, mailbox)
        subs = self.subscribers.get(key)
        if subs is not None:
            subs.discard(s)
            if not subs:
                del self.subscribers[key]
        if s.subscribed == mailbox:
            s.subscribed = None

    def active(self) -> frozenset[tuple[str, str]]:
        """(app, mailbox) pairs with a subscriber here: in use, so never pruned."""
        return frozenset(self.subscribers)

    # ---- timers -----------------------------------------------------------------------------
    def prune(self, now: float, expiry: float) -> Request:
        """Ask the store to delete channels idle for `expiry` seconds; subscribed ones count as active."""
        return Request(None, Prune(now, expiry, self.active()))


__all__ = ["Drop", "MailboxCore", "Output", "Request", "Send", "Session", "Usage"]

_HANDLERS: dict[str, Callable[..., Op | None]] = {
    "list": MailboxCore._list, "allocate": MailboxCore._allocate, "claim": MailboxCore._claim,
    "release": MailboxCore._release, "open": MailboxCore._open, "add": MailboxCore._add,
    "close": MailboxCore._close,
}


def _named_or_current(given: bool, named: Any, current: str | None, same_error: str, follow_error: str) -> Any:
    """`release`/`close` may name their nameplate/mailbox; it must then match this connection's claim
    or open, and without a name there must be one to follow (the reference's rules and strings)."""
    if given:
        if current is not None and named != current:
            raise m.ProtocolError(same_error)
        return named
    if current is None:
        raise m.ProtocolError(follow_error)
    return current
