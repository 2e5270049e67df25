"""Real magic-wormhole 0.24 and wormhole-william clients exchanging through our mailbox server."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import pytest

from harness.wormhole_servers import MailboxProcess, TransitRelay, wormhole

pytestmark = [pytest.mark.interop]
NO_TRANSIT = "tcp:127.0.0.1:1"  # text needs no transit; a dead helper keeps clients off the internet
WILLIAM = shutil.which("wormhole-william")


@pytest.fixture
def william() -> str:
    """The wormhole-william binary; its absence fails the test (make test installs it as root)."""
    if WILLIAM is None:
        pytest.fail("wormhole-william is not installed: apt-get install -y wormhole-william")
    return WILLIAM


@pytest.fixture
def mailbox(tmp_path):
    server = MailboxProcess(str(tmp_path / "mailbox.sqlite")).start()
    yield server
    server.stop()


def run_pair(send_cmd, recv_cmd, cwd, timeout=60):
    sender = subprocess.Popen(send_cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        receiver = subprocess.run(recv_cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        out, _ = sender.communicate(timeout=timeout)
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
    return sender.returncode, out, receiver


def test_wormhole_text(mailbox, tmp_path):
    code = "5-quiet-otter"
    rc, out, rx = run_pair(wormhole(mailbox.url, NO_TRANSIT, "send", "--code", code, "--text", "hello burrow"),
                           wormhole(mailbox.url, NO_TRANSIT, "receive", code), tmp_path)
    assert rx.returncode == 0, rx.stderr
    assert rx.stdout.strip() == "hello burrow"
    assert rc == 0, out
    assert "text message sent" in out


def test_wormhole_file_via_transit_relay(mailbox, tmp_path):
    relay = TransitRelay()
    try:
        src = tmp_path / "src"
        dst = tmp_path / "dst"
        src.mkdir()
        dst.mkdir()
        payload = bytes(range(256)) * 4096  # 1 MiB
        (src / "blob.bin").write_bytes(payload)
        code = "6-brave-heron"
        rc, out, rx = run_pair(
            wormhole(mailbox.url, relay.hint, "send", "--code", code, str(src / "blob.bin")),
            wormhole(mailbox.url, relay.hint, "receive", "--accept-file", "-o", str(dst / "blob.bin"), code),
            tmp_path)
        assert rx.returncode == 0, rx.stderr + rx.stdout
        assert rc == 0, out
        got = (dst / "blob.bin").read_bytes()
        assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
    finally:
        relay.stop()


def test_william_sends_to_magic_wormhole(mailbox, tmp_path, william):
    code = "7-amber-falcon"
    send = [william, "send", "--relay-url", mailbox.url, "--code", code, "--text", "from william"]
    rc, out, rx = run_pair(send, wormhole(mailbox.url, NO_TRANSIT, "receive", code), tmp_path)
    assert rx.returncode == 0, rx.stderr
    assert rx.stdout.strip() == "from william"
    assert rc == 0, out


def test_magic_wormhole_sends_to_william(mailbox, tmp_path, william):
    code = "8-silver-lynx"
    recv = [william, "receive", "--relay-url", mailbox.url, code]
    rc, out, rx = run_pair(wormhole(mailbox.url, NO_TRANSIT, "send", "--code", code, "--text", "to william"),
                           recv, tmp_path)
    assert rx.returncode == 0, rx.stderr + rx.stdout
    assert "to william" in rx.stdout
    assert rc == 0, out


def test_william_allocated_code_to_william(mailbox, tmp_path, william):
    """No fixed code: the sender allocates a nameplate and prints the code the receiver types."""
    sender = subprocess.Popen([william, "send", "--relay-url", mailbox.url, "--text", "allocated"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        code = None
        for line in sender.stdout:
            if line.startswith("Wormhole code is:"):
                code = line.split()[-1]
                break
        assert code and code.split("-")[0].isdigit(), code
        rx = subprocess.run([william, "receive", "--relay-url", mailbox.url, code], capture_output=True,
                            text=True, timeout=60, cwd=tmp_path)
        assert rx.returncode == 0, rx.stderr
        assert "allocated" in rx.stdout
        sender.wait(60)
        assert sender.returncode == 0
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()


def test_signal_error_reaches_the_real_client(tmp_path):
    server = MailboxProcess(str(tmp_path / "mb.sqlite"), extra=["--signal-error", "down for maintenance"]).start()
    try:
        proc = subprocess.run(wormhole(server.url, NO_TRANSIT, "send", "--code", "3-red-fox", "--text", "x"),
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert proc.returncode != 0
        assert "down for maintenance" in proc.stdout + proc.stderr
    finally:
        server.stop()


def test_motd_is_shown_and_exchange_continues(tmp_path):
    server = MailboxProcess(str(tmp_path / "mb.sqlite"), extra=["--motd", "be nice to the server"]).start()
    try:
        code = "4-calm-moose"
        rc, out, rx = run_pair(wormhole(server.url, NO_TRANSIT, "send", "--code", code, "--text", "motd ok"),
                               wormhole(server.url, NO_TRANSIT, "receive", code), tmp_path)
        assert rx.returncode == 0 and rx.stdout.strip() == "motd ok", rx.stderr
        assert "be nice to the server" in out + rx.stderr
    finally:
        server.stop()


def test_wormhole_allocated_code(mailbox, tmp_path):
    """magic-wormhole without --code: allocate, claim, then the receiver types the printed code."""
    sender = subprocess.Popen(wormhole(mailbox.url, NO_TRANSIT, "send", "--text", "short code"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        code = None
        for line in sender.stdout:
            if line.startswith("Wormhole code is:"):
                code = line.split()[-1]
                break
        assert code and code.split("-")[0] in {str(i) for i in range(1, 10)}, code  # 1-9 are free
        rx = subprocess.run(wormhole(mailbox.url, NO_TRANSIT, "receive", code), capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
        assert rx.returncode == 0, rx.stderr
        assert rx.stdout.strip() == "short code"
        sender.communicate(timeout=60)
        assert sender.returncode == 0
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
