"""The SQLite write-behind store against a real database file: what is committed comes back."""

from __future__ import annotations

from burrow.mailbox_server.store import Store

from .vectors import Harness


def _commit(h: Harness, store: Store) -> None:
    changes = h.store.take_changes()
    if changes is not None:
        store.apply(changes)


def _snapshot(apps):
    return {a.app_id: ({n: (np.mailbox_id, {k: (v.claimed, v.added) for k, v in np.sides.items()})
                        for n, np in a.nameplates.items()},
                       {i: (mb.for_nameplate, mb.updated, {k: (v.opened, v.added, v.mood) for k, v in mb.sides.items()},
                            [tuple(x) for x in ((sm.side, sm.phase, sm.body, sm.server_rx, sm.msg_id)
                                                for sm in mb.messages)])
                        for i, mb in a.mailboxes.items()})
            for a in apps.values() if a.mailboxes or a.nameplates}


def test_state_survives_reopen(tmp_path):
    path = str(tmp_path / "mb.sqlite")
    store = Store(path)
    h = Harness()
    a, b = h.bound("a"), h.bound("b")
    h.send(a, type="claim", nameplate="7")
    h.send(a, type="open", mailbox="mb1")
    h.send(a, type="add", phase="pake", body="aa", id="i1")
    _commit(h, store)
    h.send(b, type="claim", nameplate="7")
    h.send(b, type="open", mailbox="mb1")
    h.send(b, type="add", phase="pake", body="bb", id=5)
    h.send(a, type="release")
    h.send(a, type="close", mood="happy")
    c = h.bound("c", appid="other")
    h.send(c, type="open", mailbox="x")
    h.send(c, type="close", mood="lonely")  # created and deleted within one batch
    _commit(h, store)
    store.close()

    again = Store(path)
    loaded = again.load()
    assert _snapshot(loaded) == _snapshot(h.store.apps)
    mb = loaded["app"].mailboxes["mb1"]
    assert [m.msg_id for m in mb.messages] == ["i1", 5]
    assert mb.body_bytes == 4 and mb.persisted == 2
    again.close()


def test_mailbox_recreated_in_one_batch_loses_old_messages(tmp_path):
    store = Store(str(tmp_path / "mb.sqlite"))
    h = Harness()
    a = h.bound("a")
    h.send(a, type="open", mailbox="m")
    h.send(a, type="add", phase="0", body="00")
    _commit(h, store)
    h.send(a, type="close")
    b = h.bound("b")
    h.send(b, type="open", mailbox="m")
    h.send(b, type="add", phase="1", body="11")
    _commit(h, store)
    loaded = store.load()
    assert [(m.side, m.phase) for m in loaded["app"].mailboxes["m"].messages] == [("b", "1")]


def test_refuses_foreign_schema_version(tmp_path):
    import sqlite3

    import pytest

    from burrow.mailbox_server.store import StoreError

    path = str(tmp_path / "x.sqlite")
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE burrow_version (version INTEGER)")
    db.execute("INSERT INTO burrow_version VALUES (99)")
    db.commit()
    db.close()
    with pytest.raises(StoreError):
        Store(path)
