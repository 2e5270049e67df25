"""A pair that loses the server mid-exchange still completes: the server is SIGKILLed (no graceful
shutdown, so only what was committed survives) and restarted on the same port and database."""

from __future__ import annotations

import sqlite3
import subprocess
import time

import pytest

from harness.wormhole_servers import MailboxProcess, TransitRelay, wormhole

pytestmark = [pytest.mark.interop, pytest.mark.slow]
NO_TRANSIT = "tcp:127.0.0.1:1"


def stored_phases(db: str) -> list[str]:
    try:
        con = sqlite3.connect(db, timeout=1)
        try:
            return [r[0] for r in con.execute("SELECT phase FROM messages ORDER BY server_rx")]
        finally:
            con.close()
    except sqlite3.Error:
        return []


def test_pair_survives_server_kill_and_restart(tmp_path):
    db = str(tmp_path / "mailbox.sqlite")
    server = MailboxProcess(db).start()
    code = "9-sturdy-badger"
    sender = subprocess.Popen(wormhole(server.url, NO_TRANSIT, "send", "--code", code, "--text", "survived"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while "pake" not in stored_phases(db):
            assert time.monotonic() < deadline, "sender never added its pake"
            assert sender.poll() is None
            time.sleep(0.1)
        server.kill()  # SIGKILL: the sender's pake must already be on disk
        assert stored_phases(db) == ["pake"]
        time.sleep(0.5)  # the sender notices and starts its reconnect back-off
        server = MailboxProcess(db, port=server.port).start()
        rx = subprocess.run(wormhole(server.url, NO_TRANSIT, "receive", code), capture_output=True, text=True,
                            timeout=90, cwd=tmp_path)
        assert rx.returncode == 0, rx.stderr
        assert rx.stdout.strip() == "survived"
        out, _ = sender.communicate(timeout=60)
        assert sender.returncode == 0, out
        assert "text message sent" in out
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
        server.stop()


def test_connected_pair_survives_restart_between_offer_and_answer(tmp_path):
    """Both sides are connected and have exchanged pake, version and the file offer when the server dies;
    both reconnect to the restarted server and the transfer completes."""

    db = str(tmp_path / "mailbox.sqlite")
    relay = TransitRelay()
    server = MailboxProcess(db).start()
    (tmp_path / "doc.txt").write_text("mid-exchange restart\n" * 100)
    (tmp_path / "out").mkdir()
    code = "11-patient-walrus"
    sender = subprocess.Popen(wormhole(server.url, relay.hint, "send", "--code", code, "doc.txt"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    receiver = subprocess.Popen(wormhole(server.url, relay.hint, "receive", code), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                cwd=tmp_path / "out")
    try:
        deadline = time.monotonic() + 40
        # the offer is phase "0" from the sender; the receiver now waits for a human answer
        while stored_phases(db).count("0") < 1 or stored_phases(db).count("version") < 2:
            assert time.monotonic() < deadline, stored_phases(db)
            assert sender.poll() is None and receiver.poll() is None
            time.sleep(0.1)
        time.sleep(0.3)
        server.kill()
        time.sleep(0.5)
        server = MailboxProcess(db, port=server.port).start()
        out_r, _ = receiver.communicate("y\n", timeout=90)
        assert receiver.returncode == 0, out_r
        out_s, _ = sender.communicate(timeout=60)
        assert sender.returncode == 0, out_s
        assert (tmp_path / "out" / "doc.txt").read_text() == "mid-exchange restart\n" * 100
    finally:
        for p in (sender, receiver):
            if p.poll() is None:
                p.kill()
                p.wait()
        server.stop()
        relay.stop()
