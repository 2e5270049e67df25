"""SQLite persistence: write-behind of the in-memory state, one transaction per event-loop tick.

The adapter calls `apply(changes)` (in a worker thread) with everything that changed during one
tick, and sends the replies of that tick only after the commit returns: a message is on disk before
anyone is told about it, yet N messages cost one fsync, not N. `load()` rebuilds the state at start.
WAL with synchronous=FULL makes each commit durable with a single fsync of the log.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

from .changes import Changes
from .state import App, Mailbox, MailboxSide, Nameplate, NameplateSide, StoredMessage

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS burrow_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS mailboxes (
    app_id TEXT NOT NULL, id TEXT NOT NULL, for_nameplate INTEGER NOT NULL, updated REAL NOT NULL,
    sides TEXT NOT NULL,  -- JSON {side: [opened, added, mood]}
    PRIMARY KEY (app_id, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS nameplates (
    app_id TEXT NOT NULL, name TEXT NOT NULL, mailbox_id TEXT NOT NULL,
    sides TEXT NOT NULL,  -- JSON {side: [claimed, added]}
    PRIMARY KEY (app_id, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    app_id TEXT NOT NULL, mailbox_id TEXT NOT NULL, side TEXT NOT NULL, phase TEXT NOT NULL,
    body TEXT NOT NULL, server_rx REAL NOT NULL, msg_id TEXT);
CREATE INDEX IF NOT EXISTS messages_by_mailbox ON messages (app_id, mailbox_id);
"""


class StoreError(Exception):
    """The database is unusable (wrong schema version, unreadable file)."""


def _msg_id_out(raw: Any) -> Any:
    # msg_id is stored as JSON so ints and strings come back as they were sent
    return None if raw is None else json.loads(raw)


class Store:
    def __init__(self, path: str, fsync: bool = True) -> None:
        self.path = path
        if path != ":memory:" and not path.startswith("file:"):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        # used by one worker thread at a time (the adapter serialises calls)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        # FULL: each commit is fsynced (survives power loss). NORMAL: survives a process crash only.
        self.db.execute("PRAGMA synchronous=" + ("FULL" if fsync else "NORMAL"))
        self.db.executescript(_SCHEMA)
        row = self.db.execute("SELECT version FROM burrow_version").fetchone()
        if row is None:
            self.db.execute("INSERT INTO burrow_version VALUES (?)", (SCHEMA_VERSION,))
        elif row[0] != SCHEMA_VERSION:
            raise StoreError(f"{path}: schema version {row[0]}, this server knows {SCHEMA_VERSION}")
        self.commits = 0

    def load(self) -> dict[str, App]:
        apps: dict[str, App] = {}

        def app(app_id: str) -> App:
            return apps.get(app_id) or apps.setdefault(app_id, App(app_id))

        for app_id, mid, for_np, updated, sides in self.db.execute("SELECT * FROM mailboxes"):
            mb = Mailbox(mid, bool(for_np), updated)
            mb.sides = {k: MailboxSide(bool(v[0]), v[1], v[2]) for k, v in json.loads(sides).items()}
            app(app_id).mailboxes[mid] = mb
        rows = self.db.execute("SELECT app_id, mailbox_id, side, phase, body, server_rx, msg_id"
                               " FROM messages ORDER BY server_rx, rowid")
        for app_id, mid, side, phase, body, rx, msg_id in rows:
            mb = apps[app_id].mailboxes.get(mid) if app_id in apps else None
            if mb is None:
                continue  # orphaned rows are purged below
            mb.messages.append(StoredMessage(side, phase, body, rx, _msg_id_out(msg_id)))
            mb.body_bytes += len(body)
        for a in apps.values():
            for mb in a.mailboxes.values():
                mb.persisted = len(mb.messages)
        for app_id, name, mid, sides in self.db.execute("SELECT * FROM nameplates"):
            np = Nameplate(name, mid, {k: NameplateSide(bool(v[0]), v[1]) for k, v in json.loads(sides).items()})
            app(app_id).add_nameplate(np)
        self.db.execute("DELETE FROM messages WHERE NOT EXISTS (SELECT 1 FROM mailboxes m"
                        " WHERE m.app_id = messages.app_id AND m.id = messages.mailbox_id)")
        return apps

    def apply(self, ch: Changes) -> None:
        db = self.db
        db.execute("BEGIN")
        try:
            if ch.purge_messages:
                db.executemany("DELETE FROM messages WHERE app_id=? AND mailbox_id=?", ch.purge_messages)
            if ch.delete_mailboxes:
                db.executemany("DELETE FROM mailboxes WHERE app_id=? AND id=?", ch.delete_mailboxes)
            if ch.put_mailboxes:
                db.executemany("INSERT OR REPLACE INTO mailboxes VALUES (?,?,?,?,?)",
                               [(a, i, f, u, json.dumps(s)) for a, i, f, u, s in ch.put_mailboxes])
            if ch.add_messages:
                db.executemany("INSERT INTO messages VALUES (?,?,?,?,?,?,?)",
                               [(*r[:6], None if r[6] is None else json.dumps(r[6])) for r in ch.add_messages])
            if ch.delete_nameplates:
                db.executemany("DELETE FROM nameplates WHERE app_id=? AND name=?", ch.delete_nameplates)
            if ch.put_nameplates:
                db.executemany("INSERT OR REPLACE INTO nameplates VALUES (?,?,?,?)",
                               [(a, n, mid, json.dumps(s)) for a, n, mid, s in ch.put_nameplates])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.commits += 1

    def close(self) -> None:
        self.db.close()
