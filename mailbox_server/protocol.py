"""The mailbox protocol state machine, sans-IO.

in:  `connect(now, address)`, `receive(session, payload, now)`, `disconnect(session, now)`, `prune(now)`
out: lists of `Send(session, msg)` / `Drop(session, reason, text)` / `Usage(event, fields)`, and
     `take_changes()` (what the store must commit before those sends leave the process).
states per connection: unbound -> bound (appid, side) with once-only claim/release/open/close flags.

All state lives in memory (`state.py`); every mutation marks its mailbox or nameplate dirty so the
adapter can commit one transaction per event-loop tick before delivering the replies of that tick.
"""

from __future__ import annotations

import base64
import os
import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from . import messages as m
from .changes import Changes
from .limits import Limits
from .outputs import Drop, Output, Send, Session, Usage
from .state import (
    App,
    Mailbox,
    MailboxSide,
    Nameplate,
    NameplateSide,
    StoredMessage,
    mailbox_usage,
    nameplate_usage,
)


def new_mailbox_id() -> str:
    return base64.b32encode(os.urandom(8)).lower().strip(b"=").decode("ascii")


class MailboxCore:
    def __init__(self, limits: Limits | None = None, welcome: dict[str, Any] | None = None,
                 allow_list: bool = True, rng: random.Random | None = None,
                 mailbox_id: Callable[[], str] = new_mailbox_id) -> None:
        self.limits = limits or Limits()
        self.welcome = dict(welcome or {})
        self.allow_list = allow_list
        self.rng = rng or random.Random()
        self.new_mailbox_id = mailbox_id
        self.apps: dict[str, App] = {}
        self.sessions: set[Session] = set()
        self.mailbox_count = 0
        self.nameplate_count = 0
        self.stored_bytes = 0  # message bodies held in memory (and on disk)
        # counters read by the metrics collector
        self.messages_total = 0
        self.errors: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()
        self.moods: Counter[str] = Counter()
        self._dirty_mb: set[tuple[str, str]] = set()
        self._dirty_np: set[tuple[str, str]] = set()
        self._purged: set[tuple[str, str]] = set()

    # ---- connection life cycle -------------------------------------------------------------
    def connect(self, now: float, address: dict[str, Any] | None = None) -> tuple[Session, list[Output]]:
        s = Session(started=now, bucket_tokens=self.limits.burst_messages, bucket_stamp=now)
        self.sessions.add(s)
        info = dict(self.welcome)
        if address is not None:
            info["your-address"] = address
        return s, [Send(s, m.welcome(info))]

    def disconnect(self, s: Session, now: float) -> None:
        if s.mailbox is not None:
            s.mailbox.listeners.discard(s)
            s.mailbox = None
        s.closed = True
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
            self._dispatch(s, msg, now, out)
        except m.FatalProtocolError as e:
            self._error(s, e.text, msg, out)
            reason = "limit" if e.text in (m.TOO_FAST, m.TOO_LARGE) else "protocol"
            out.append(Drop(s, reason, e.text))
            s.closed = True
        except m.ProtocolError as e:
            self._error(s, e.text, msg, out)
        return out

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

    def _dispatch(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> None:
        mtype = msg["type"]
        if mtype == "ping":
            if "ping" not in msg:
                raise m.ProtocolError(m.PING_REQUIRES)
            out.append(Send(s, {"type": "pong", "pong": msg["ping"]}))
            return
        if mtype == "bind":
            if s.app is not None:
                raise m.ProtocolError(m.ALREADY_BOUND)
            b = m.Bind.decode(msg)
            s.app = self.apps.get(b.appid) or self.apps.setdefault(b.appid, App(b.appid))
            s.side, s.client_impl, s.client_version = b.side, b.client_impl, b.client_version
            return
        if s.app is None:
            raise m.ProtocolError(m.MUST_BIND)
        handler = _HANDLERS.get(mtype)
        if handler is None:
            raise m.ProtocolError(m.UNKNOWN_TYPE)
        handler(self, s, msg, now, out)

    def _list(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> None:
        names = sorted(s.app.nameplates) if self.allow_list else []
        out.append(Send(s, {"type": "nameplates", "nameplates": [{"id": n} for n in names]}))

    def _allocate(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> None:
        if s.did_allocate:
            raise m.ProtocolError(m.GREEDY)
        name = s.app.free_nameplate(self.rng)
        if name is None:
            self.refusals["nameplates"] += 1
            raise m.FatalProtocolError(m.NO_NAMEPLATES)
        self._claim_nameplate(s, name, now)
        s.did_allocate = True
        out.append(Send(s, {"type": "allocated", "nameplate": name}))

    def _claim(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> None:
        c = m.Claim.decode(msg)
        if s.did_claim:
            raise m.ProtocolError(m.ONE_CLAIM)
        s.did_claim = True
        if not m.valid_nameplate(c.nameplate):
            raise m.FatalProtocolError(m.BAD_NAMEPLATE)
        s.nameplate = c.nameplate
        mailbox_id = self._claim_nameplate(s, c.nameplate, now)
        out.append(Send(s, {"type": "claimed", "mailbox": mailbox_id}))

    def _release(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> None:
        if s.did_release:
            raise m.ProtocolError(m.ONE_RELEASE)
        r = m.Release.decode(msg)
        name = _named_or_current(r.given, r.nameplate, s.nameplate, m.RELEASE_SAME, m.RELEASE_FOLLOW)
        s.did_release = True
        app = s.app
        np = app.nameplates.get(name) if isinstance(name, str) else None
        ns = np.sides.get(s.side) if np is not None else None
        if ns is not None:
            ns.claimed = False
            self._dirty_np.add((app.app_id, np.name))
            if not any(x.claimed for x in np.sides.values()):
                self._delete_nameplate(app, np, now, False, out)
        out.append(Send(s, {"type": "released"}))

    def _open(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> None:
        if s.mailbox is not None:
            raise m.ProtocolError(m.ONE_OPEN)
        o = m.Open.decode(msg)
        s.mailbox_id = o.mailbox
        mb = self._open_mailbox(s, o.mailbox, False, now)
        s.mailbox = mb
        mb.listeners.add(s)
        for sm in mb.messages:
            out.append(Send(s, m.message(sm.side, sm.phase, sm.body, sm.server_rx, sm.msg_id)))

    def _add(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> None:
        mb = s.mailbox
        if mb is None:
            raise m.ProtocolError(m.MUST_OPEN)
        a = m.Add.decode(msg)
        if 0 < self.limits.max_message_bytes < len(a.body) + len(a.phase):
            self.refusals["message_bytes"] += 1
            raise m.ProtocolError(m.TOO_LARGE)
        if 0 < self.limits.max_messages_per_mailbox <= len(mb.messages):
            self.refusals["messages_per_mailbox"] += 1
            raise m.ProtocolError(m.MAILBOX_FULL)
        size = len(a.body) + len(a.phase)
        if 0 < self.limits.max_mailbox_bytes < mb.body_bytes + size:
            self.refusals["mailbox_bytes"] += 1
            raise m.ProtocolError(m.MAILBOX_FULL)
        if 0 < self.limits.max_stored_bytes < self.stored_bytes + size:
            self.refusals["stored_bytes"] += 1
            raise m.ProtocolError(m.SERVER_FULL)
        sm = StoredMessage(s.side, a.phase, a.body, now, a.msg_id)
        mb.messages.append(sm)
        mb.body_bytes += len(a.body)
        self.stored_bytes += len(a.body)
        mb.updated = now
        self._dirty_mb.add((s.app.app_id, mb.id))
        self.messages_total += 1
        wire = m.message(sm.side, sm.phase, sm.body, sm.server_rx, sm.msg_id)
        for listener in mb.listeners:
            out.append(Send(listener, wire, True))

    def _close(self, s: Session, msg: dict[str, Any], now: float, out: list[Output]) -> None:
        if s.did_close:
            raise m.ProtocolError(m.ONE_CLOSE)
        c = m.Close.decode(msg)
        mailbox_id = _named_or_current(c.given, c.mailbox, s.mailbox_id, m.CLOSE_SAME, m.CLOSE_FOLLOW)
        if not isinstance(mailbox_id, str):
            raise m.FatalProtocolError(m.BAD_MAILBOX)
        if not m.text_ok(mailbox_id):
            raise m.FatalProtocolError(m.BAD_TEXT)
        mb = s.mailbox
        if mb is None:
            mb = self._open_mailbox(s, mailbox_id, False, now)
        else:
            mb.listeners.discard(s)
        s.did_close = True
        s.mailbox = None
        app = s.app
        side = mb.sides.get(s.side)
        if app.mailboxes.get(mb.id) is mb and side is not None:
            side.opened = False
            side.mood = c.mood
            self._dirty_mb.add((app.app_id, mb.id))
            if not any(x.opened for x in mb.sides.values()):
                self._delete_mailbox(app, mb, now, False, out)
        out.append(Send(s, {"type": "closed"}))

    # ---- nameplates and mailboxes -----------------------------------------------------------
    def _claim_nameplate(self, s: Session, name: str, now: float) -> str:
        app = s.app
        np = app.nameplates.get(name)
        if np is None:
            self._check_mailbox_room(s, None)
            mailbox_id = self.new_mailbox_id()
            self._create_mailbox(app, mailbox_id, True, now)
            np = Nameplate(name, mailbox_id)
            app.add_nameplate(np)
            self.nameplate_count += 1
        ns = np.sides.get(s.side)
        if ns is None:
            np.sides[s.side] = NameplateSide(True, now)
        elif not ns.claimed:
            raise m.ProtocolError(m.RECLAIMED)
        self._dirty_np.add((app.app_id, name))
        self._open_mailbox(s, np.mailbox_id, True, now)
        if len(np.sides) > 2:
            raise m.ProtocolError(m.CROWDED)
        return np.mailbox_id

    def _check_mailbox_room(self, s: Session, mailbox_id: str | None) -> None:
        if mailbox_id is not None and mailbox_id in s.touched:
            return
        if 0 < self.limits.max_mailboxes_per_connection <= len(s.touched):
            self.refusals["mailboxes_per_connection"] += 1
            raise m.ProtocolError(m.TOO_MANY_MAILBOXES)
        if mailbox_id is None or mailbox_id not in s.app.mailboxes:
            if 0 < self.limits.max_mailboxes <= self.mailbox_count:
                self.refusals["mailboxes"] += 1
                raise m.ProtocolError(m.SERVER_FULL)

    def _create_mailbox(self, app: App, mailbox_id: str, for_nameplate: bool, now: float) -> Mailbox:
        mb = Mailbox(mailbox_id, for_nameplate, now)
        app.mailboxes[mailbox_id] = mb
        self.mailbox_count += 1
        self._dirty_mb.add((app.app_id, mailbox_id))
        return mb

    def _open_mailbox(self, s: Session, mailbox_id: str, for_nameplate: bool, now: float) -> Mailbox:
        app = s.app
        self._check_mailbox_room(s, mailbox_id)
        mb = app.mailboxes.get(mailbox_id) or self._create_mailbox(app, mailbox_id, for_nameplate, now)
        s.touched.add(mailbox_id)
        if s.side not in mb.sides:
            # a side that closed and re-opens stays closed, as in the reference
            mb.sides[s.side] = MailboxSide(True, now)
        mb.updated = now
        self._dirty_mb.add((app.app_id, mailbox_id))
        if len(mb.sides) > 2:
            raise m.ProtocolError(m.CROWDED)
        return mb

    def _delete_nameplate(self, app: App, np: Nameplate, now: float, pruned: bool, out: list[Output]) -> None:
        app.remove_nameplate(np.name)
        self.nameplate_count -= 1
        self._dirty_np.add((app.app_id, np.name))
        fields = nameplate_usage(np, now, pruned)
        self.moods["nameplate:" + fields["mood"]] += 1
        out.append(Usage("nameplate", {"app_id": app.app_id, **fields}))

    def _delete_mailbox(self, app: App, mb: Mailbox, now: float, pruned: bool, out: list[Output]) -> None:
        for np in [np for np in app.nameplates.values() if np.mailbox_id == mb.id]:
            self._delete_nameplate(app, np, now, pruned, out)
        del app.mailboxes[mb.id]
        self.mailbox_count -= 1
        self.stored_bytes -= mb.body_bytes
        key = (app.app_id, mb.id)
        self._dirty_mb.add(key)
        self._purged.add(key)
        for listener in mb.listeners:
            listener.mailbox = None
        mb.listeners.clear()
        fields = mailbox_usage(mb, now, pruned)
        self.moods[fields["mood"]] += 1
        out.append(Usage("mailbox", {"app_id": app.app_id, **fields}))

    # ---- timers -----------------------------------------------------------------------------
    def prune(self, now: float, expiry: float) -> list[Output]:
        """Delete channels idle for `expiry` seconds; subscribed mailboxes count as active."""
        out: list[Output] = []
        old = now - expiry
        bound = {s.app.app_id for s in self.sessions if s.app is not None}
        for app in list(self.apps.values()):
            for mb in list(app.mailboxes.values()):
                if mb.listeners:
                    mb.updated = now
                    self._dirty_mb.add((app.app_id, mb.id))
                elif mb.updated <= old:
                    self._delete_mailbox(app, mb, now, True, out)
            for np in list(app.nameplates.values()):
                if np.mailbox_id not in app.mailboxes:  # orphan (only from an old database)
                    self._delete_nameplate(app, np, now, True, out)
            if not app.mailboxes and not app.nameplates and app.app_id not in bound:
                del self.apps[app.app_id]
        return out

    # ---- persistence ------------------------------------------------------------------------
    def take_changes(self) -> Changes | None:
        """Snapshot what changed since the last call, as rows for the store to commit."""
        if not (self._dirty_mb or self._dirty_np):
            return None
        ch = Changes()
        for app_id, mid in self._dirty_mb:
            app = self.apps.get(app_id)
            mb = app.mailboxes.get(mid) if app else None
            if (app_id, mid) in self._purged:
                ch.purge_messages.append((app_id, mid))
            if mb is None:
                ch.delete_mailboxes.append((app_id, mid))
                continue
            sides = {k: [v.opened, v.added, v.mood] for k, v in mb.sides.items()}
            ch.put_mailboxes.append((app_id, mid, int(mb.for_nameplate), mb.updated, sides))
            for sm in mb.messages[mb.persisted:]:
                ch.add_messages.append((app_id, mid, sm.side, sm.phase, sm.body, sm.server_rx, sm.msg_id))
            mb.persisted = len(mb.messages)
        for app_id, name in self._dirty_np:
            app = self.apps.get(app_id)
            np = app.nameplates.get(name) if app else None
            if np is None:
                ch.delete_nameplates.append((app_id, name))
            else:
                sides = {k: [v.claimed, v.added] for k, v in np.sides.items()}
                ch.put_nameplates.append((app_id, name, np.mailbox_id, sides))
        self._dirty_mb.clear()
        self._dirty_np.clear()
        self._purged.clear()
        return ch

    def load(self, apps: dict[str, App]) -> None:
        """Adopt the state read from the store at start-up."""
        self.apps = apps
        self.mailbox_count = sum(len(a.mailboxes) for a in apps.values())
        self.nameplate_count = sum(len(a.nameplates) for a in apps.values())
        self.stored_bytes = sum(mb.body_bytes for a in apps.values() for mb in a.mailboxes.values())


__all__ = ["Drop", "MailboxCore", "Output", "Send", "Session", "Usage"]

_HANDLERS: dict[str, Callable[..., None]] = {
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
