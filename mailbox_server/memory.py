"""The single-node channel store: every app's nameplates, mailboxes and messages in this process's memory.

It answers each `Op` (ops.py) at once with the reference server's rules, and records what changed so the
adapter can write it behind to SQLite (`take_changes()`, one transaction per event-loop tick, committed
before any reply leaves). `load()` adopts the state `store.py` read back at start-up.
"""

from __future__ import annotations

import base64
import os
import random
from collections.abc import Callable

from . import messages as m
from .changes import Changes
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


class Refused(Exception):
    """An operation stops with an `error` for the client; what it changed before that stays."""

    def __init__(self, text: str, refusal: str | None = None, fatal: bool = False) -> None:
        super().__init__(text)
        self.text, self.refusal, self.fatal = text, refusal, fatal


class MemoryChannels:
    def __init__(self, limits: Limits | None = None, rng: random.Random | None = None,
                 mailbox_id: Callable[[], str] = new_mailbox_id) -> None:
        self.limits = limits or Limits()
        self.rng = rng or random.Random()
        self.new_mailbox_id = mailbox_id
        self.apps: dict[str, App] = {}
        self.mailbox_count = 0
        self.nameplate_count = 0
        self.stored_bytes = 0  # message bodies held in memory (and on disk)
        self._dirty_mb: set[tuple[str, str]] = set()
        self._dirty_np: set[tuple[str, str]] = set()
        self._purged: set[tuple[str, str]] = set()

    def apply(self, op: Op | Prune) -> Result:
        if type(op) is Prune:
            return self.prune(op)
        res = Result()
        app = self.apps.get(op.app) or self.apps.setdefault(op.app, App(op.app))
        try:
            _HANDLERS[type(op)](self, app, op, res)
        except Refused as e:
            res.error, res.refusal, res.fatal = e.text, e.refusal, e.fatal
        return res

    def counts(self) -> tuple[int, int, int]:
        return self.mailbox_count, self.nameplate_count, self.stored_bytes

    # ---- operations -------------------------------------------------------------------------
    def _list(self, app: App, op: ListNames, res: Result) -> None:
        res.value = sorted(app.nameplates)

    def _allocate(self, app: App, op: Allocate, res: Result) -> None:
        name = app.free_nameplate(self.rng)
        if name is None:
            raise Refused(m.NO_NAMEPLATES, "nameplates", fatal=True)
        self._claim_nameplate(app, op.side, name, op.now, set(op.touched), op.max_touched, res)
        res.value = name

    def _claim(self, app: App, op: Claim, res: Result) -> None:
        res.value = self._claim_nameplate(app, op.side, op.name, op.now, set(op.touched), op.max_touched, res)

    def _release(self, app: App, op: Release, res: Result) -> None:
        np = app.nameplates.get(op.name)
        ns = np.sides.get(op.side) if np is not None else None
        if ns is not None:
            ns.claimed = False
            self._dirty_np.add((app.app_id, np.name))
            if not any(x.claimed for x in np.sides.values()):
                self._delete_nameplate(app, np, op.now, False, res)

    def _open(self, app: App, op: Open, res: Result) -> None:
        mb = self._open_mailbox(app, op.side, op.mailbox, False, op.now, set(op.touched), op.max_touched, res)
        res.replay = [m.message(sm.side, sm.phase, sm.body, sm.server_rx, sm.msg_id) for sm in mb.messages]

    def _add(self, app: App, op: Add, res: Result) -> None:
        mb = app.mailboxes.get(op.mailbox)
        if mb is None:  # deleted while the connection was subscribed
            raise Refused(m.MUST_OPEN)
        lim = self.limits
        if 0 < lim.max_messages_per_mailbox <= len(mb.messages):
            raise Refused(m.MAILBOX_FULL, "messages_per_mailbox")
        size = len(op.body) + len(op.phase)
        if 0 < lim.max_mailbox_bytes < mb.body_bytes + size:
            raise Refused(m.MAILBOX_FULL, "mailbox_bytes")
        if 0 < lim.max_stored_bytes < self.stored_bytes + size:
            raise Refused(m.SERVER_FULL, "stored_bytes")
        sm = StoredMessage(op.side, op.phase, op.body, op.now, op.msg_id)
        index = len(mb.messages)
        mb.messages.append(sm)
        mb.body_bytes += len(op.body)
        self.stored_bytes += len(op.body)
        mb.updated = op.now
        self._dirty_mb.add((app.app_id, mb.id))
        res.delivery = Delivery(app.app_id, mb.id, index, m.message(op.side, op.phase, op.body, op.now, op.msg_id))

    def _close(self, app: App, op: Close, res: Result) -> None:
        if op.subscribed:
            mb = app.mailboxes.get(op.mailbox)
            if mb is None:
                return
        else:
            mb = self._open_mailbox(app, op.side, op.mailbox, False, op.now, set(op.touched), op.max_touched, res)
        side = mb.sides.get(op.side)
        if side is not None:
            side.opened = False
            side.mood = op.mood
            self._dirty_mb.add((app.app_id, mb.id))
            if not any(x.opened for x in mb.sides.values()):
                self._delete_mailbox(app, mb, op.now, False, res)

    # ---- nameplates and mailboxes -----------------------------------------------------------
    def _claim_nameplate(self, app: App, side: str, name: str, now: float, touched: set[str], max_touched: int,
                         res: Result) -> str:
        np = app.nameplates.get(name)
        if np is None:
            self._check_room(app, None, touched, max_touched)
            mailbox_id = self.new_mailbox_id()
            self._create_mailbox(app, mailbox_id, True, now)
            np = Nameplate(name, mailbox_id)
            app.add_nameplate(np)
            self.nameplate_count += 1
        ns = np.sides.get(side)
        if ns is None:
            np.sides[side] = NameplateSide(True, now)
        elif not ns.claimed:
            raise Refused(m.RECLAIMED)
        self._dirty_np.add((app.app_id, name))
        self._open_mailbox(app, side, np.mailbox_id, True, now, touched, max_touched, res)
        if len(np.sides) > 2:
            raise Refused(m.CROWDED)
        return np.mailbox_id

    def _check_room(self, app: App, mailbox_id: str | None, touched: set[str], max_touched: int) -> None:
        if mailbox_id is not None and mailbox_id in touched:
            return
        if 0 < max_touched <= len(touched):
            raise Refused(m.TOO_MANY_MAILBOXES, "mailboxes_per_connection")
        if mailbox_id is None or mailbox_id not in app.mailboxes:
            if 0 < self.limits.max_mailboxes <= self.mailbox_count:
                raise Refused(m.SERVER_FULL, "mailboxes")

    def _create_mailbox(self, app: App, mailbox_id: str, for_nameplate: bool, now: float) -> Mailbox:
        mb = Mailbox(mailbox_id, for_nameplate, now)
        app.mailboxes[mailbox_id] = mb
        self.mailbox_count += 1
        self._dirty_mb.add((app.app_id, mailbox_id))
        return mb

    def _open_mailbox(self, app: App, side: str, mailbox_id: str, for_nameplate: bool, now: float,
                      touched: set[str], max_touched: int, res: Result) -> Mailbox:
        self._check_room(app, mailbox_id, touched, max_touched)
        mb = app.mailboxes.get(mailbox_id) or self._create_mailbox(app, mailbox_id, for_nameplate, now)
        touched.add(mailbox_id)
        res.touched = mailbox_id
        if side not in mb.sides:
            # a side that closed and re-opens stays closed, as in the reference
            mb.sides[side] = MailboxSide(True, now)
        mb.updated = now
        self._dirty_mb.add((app.app_id, mailbox_id))
        if len(mb.sides) > 2:
            raise Refused(m.CROWDED)
        return mb

    def _delete_nameplate(self, app: App, np: Nameplate, now: float, pruned: bool, res: Result) -> None:
        app.remove_nameplate(np.name)
        self.nameplate_count -= 1
        self._dirty_np.add((app.app_id, np.name))
        res.usage.append(("nameplate", {"app_id": app.app_id, **nameplate_usage(np, now, pruned)}))

    def _delete_mailbox(self, app: App, mb: Mailbox, now: float, pruned: bool, res: Result) -> None:
        for np in [np for np in app.nameplates.values() if np.mailbox_id == mb.id]:
            self._delete_nameplate(app, np, now, pruned, res)
        del app.mailboxes[mb.id]
        self.mailbox_count -= 1
        self.stored_bytes -= mb.body_bytes
        key = (app.app_id, mb.id)
        self._dirty_mb.add(key)
        self._purged.add(key)
        res.gone.append(key)
        res.usage.append(("mailbox", {"app_id": app.app_id, **mailbox_usage(mb, now, pruned)}))

    # ---- timers -----------------------------------------------------------------------------
    def prune(self, op: Prune) -> Result:
        """Delete channels idle for `expiry` seconds; mailboxes in `op.active` count as used now."""
        res = Result()
        old = op.now - op.expiry
        for app in list(self.apps.values()):
            for mb in list(app.mailboxes.values()):
                if (app.app_id, mb.id) in op.active:
                    mb.updated = op.now
                    self._dirty_mb.add((app.app_id, mb.id))
                elif mb.updated <= old:
                    self._delete_mailbox(app, mb, op.now, True, res)
            for np in list(app.nameplates.values()):
                if np.mailbox_id not in app.mailboxes:  # orphan (only from an old database)
                    self._delete_nameplate(app, np, op.now, True, res)
            if not app.mailboxes and not app.nameplates:
                del self.apps[app.app_id]
        return res

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


_HANDLERS: dict[type, Callable[..., None]] = {
    ListNames: MemoryChannels._list, Allocate: MemoryChannels._allocate, Claim: MemoryChannels._claim,
    Release: MemoryChannels._release, Open: MemoryChannels._open, Add: MemoryChannels._add,
    Close: MemoryChannels._close,
}
