"""`burrow` stops at once, saying why: no transit path, or Ctrl-C at the receiver's (y/N) question."""

import os
import pty
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from harness.ports import free_port

pytestmark = pytest.mark.timeout(120)
BOUND = 60  # seconds: well under the 120 s the transit race may take when something could still answer
WELL_UNDER_NEGOTIATION = 40  # seconds: less than the 60 s a relay connection may wait for its partner
FILE_SIZE = 100_000  # bytes: over INLINE_MAX, so a file goes by transit or Dilation, not inside its offer


# Ctrl-C reaches a foreground program whose SIGINT is at its default; a test run started in the
# background by a shell without job control inherits SIGINT ignored, so the child restores it first.
INTERRUPTIBLE = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                 "runpy.run_module('burrow.client.cli', run_name='__main__')")


def burrow(*args: str, **kw) -> subprocess.Popen:
    kw.setdefault("stdout", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-c", INTERRUPTIBLE, *args], stderr=subprocess.PIPE,
                            text=True, **kw)


def holding_relay() -> tuple[socket.socket, list[socket.socket]]:
    """A "relay" on 127.0.0.1 that keeps the first connection waiting for ever and closes every later one."""
    relay = socket.socket()
    relay.bind(("127.0.0.1", 0))
    relay.listen()
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = relay.accept()
            except OSError:
                return
            if held:
                conn.close()
            else:
                held.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    return relay, held


def transfer_at_holding_relay(servers, tmp_path, start, code: str, timeout: float, *send_flags: str):
    """A send and a receive (both --no-listen) whose only transit helper is a holding_relay(); returns
    (receiver, sender, receiver's stderr, sender's stderr) once both have exited."""
    relay, held = holding_relay()
    common = ["--relay-url", servers.relay_url, "--transit-helper", f"tcp:127.0.0.1:{relay.getsockname()[1]}",
              "--no-listen", "--hide-progress"]
    (tmp_path / "payload").write_bytes(os.urandom(FILE_SIZE))
    try:
        s = start("send", *common, *send_flags, str(tmp_path / "payload"), "--code", code)
        r = start("receive", *common, "--accept-file", "-o", str(tmp_path / "got"), code)
        _, rerr = r.communicate(timeout=timeout)
        _, serr = s.communicate(timeout=timeout)
    finally:
        relay.close()
        for conn in held:
            conn.close()
    return r, s, rerr, serr


def test_no_transit_path_fails_at_once_naming_what_was_tried(wormhole_servers, tmp_path):
    dead = f"tcp:127.0.0.1:{free_port()}"  # nothing listens there
    common = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", dead, "--no-listen", "--hide-progress"]
    (tmp_path / "payload").write_bytes(os.urandom(FILE_SIZE))
    # classic Transit (what magic-wormhole and wormhole-william peers get) gives up once every path failed
    s = burrow("send", *common, "--classic", str(tmp_path / "payload"), "--code", "4500-purple-sausages")
    r = burrow("receive", *common, "--accept-file", "-o", str(tmp_path / "got"), "4500-purple-sausages")
    _, rerr = r.communicate(timeout=BOUND)
    _, serr = s.communicate(timeout=BOUND)
    assert r.returncode == 7 and s.returncode == 7, (rerr, serr)
    for err, side in ((rerr, "receive"), (serr, "send")):
        last = err.strip().splitlines()[-1]
        # its own finding, or the peer's when that came first ("remote error: the receiver found no ...")
        assert last.startswith(f"burrow {side}: error: ") and "no transit path works: tried relay 127.0.0.1:" in last, err
        assert "connection refused" in last.lower() and "Traceback" not in err
    assert not (tmp_path / "got").exists()


def test_a_dilated_transfer_with_no_path_fails_at_once_naming_what_was_tried(wormhole_servers, tmp_path):
    """The default between burrow peers (Dilated): once neither side has anything left to try, both stop, each
    naming its own attempts and the peer's, instead of waiting out FIRST_CONNECTION_TIMEOUT."""
    dead = f"tcp:127.0.0.1:{free_port()}"  # nothing listens there
    common = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", dead, "--no-listen", "--hide-progress"]
    (tmp_path / "payload").write_bytes(os.urandom(FILE_SIZE))
    s = burrow("send", *common, str(tmp_path / "payload"), "--code", "4505-purple-sausages")
    r = burrow("receive", *common, "--accept-file", "-o", str(tmp_path / "got"), "4505-purple-sausages")
    _, rerr = r.communicate(timeout=BOUND)
    _, serr = s.communicate(timeout=BOUND)
    assert r.returncode == 7 and s.returncode == 7, (rerr, serr)
    for err, side, peer in ((rerr, "receive", "sender"), (serr, "send", "receiver")):
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"burrow {side}: error: no transit path works: tried relay 127.0.0.1:"), err
        assert f"; the {peer} tried relay 127.0.0.1:" in last and "Traceback" not in err, err
        assert last.lower().count("connection refused") == 2, err
    assert not (tmp_path / "got").exists()


def test_a_side_waiting_at_the_relay_hears_when_the_other_side_gives_up(wormhole_servers, tmp_path):
    # a "relay" that keeps the first connection waiting forever and closes every later one: one side waits
    # there, the other fails at once and must tell it, not leave it waiting out the 60 s negotiation
    r, s, rerr, serr = transfer_at_holding_relay(wormhole_servers, tmp_path, burrow, "4503-purple-sausages",
                                                 WELL_UNDER_NEGOTIATION, "--classic")
    assert r.returncode == 7 and s.returncode == 7, (rerr, serr)
    assert "found no transit path" in rerr + serr and "Traceback" not in rerr + serr


def test_a_listening_side_still_takes_the_peers_connection_after_its_own_dials_failed(wormhole_servers, tmp_path):
    # the sender cannot be dialled (--no-listen) and the relay is dead: the receiver's own attempts all fail,
    # but the sender reaches the receiver's listener, which is what must win
    dead = f"tcp:127.0.0.1:{free_port()}"
    common = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", dead, "--hide-progress"]
    data = os.urandom(100_000)
    (tmp_path / "payload").write_bytes(data)
    s = burrow("send", *common, "--no-listen", str(tmp_path / "payload"), "--code", "4501-purple-sausages")
    r = burrow("receive", *common, "--accept-file", "-o", str(tmp_path / "got"), "4501-purple-sausages")
    _, rerr = r.communicate(timeout=BOUND)
    _, serr = s.communicate(timeout=BOUND)
    assert r.returncode == 0 and s.returncode == 0, (rerr, serr)
    assert (tmp_path / "got").read_bytes() == data


def test_ctrl_c_at_the_code_prompt_stops_at_once_and_no_code_is_one_line(wormhole_servers):
    controller, terminal = pty.openpty()
    try:
        r = burrow("receive", "--relay-url", wormhole_servers.relay_url, stdin=terminal, stdout=terminal)
        seen = ""
        deadline = time.monotonic() + BOUND
        while "Enter receive wormhole code:" not in seen and time.monotonic() < deadline:
            seen += os.read(controller, 4096).decode()
        r.send_signal(signal.SIGINT)
        _, err = r.communicate(timeout=BOUND)  # nobody presses Enter: it must stop by itself
    finally:
        os.close(controller)
        os.close(terminal)
    assert r.returncode == 130 and "Traceback" not in err, err
    r = burrow("receive", "--relay-url", wormhole_servers.relay_url, stdin=subprocess.DEVNULL)
    _, err = r.communicate(timeout=BOUND)
    assert r.returncode == 2 and err.strip().splitlines()[-1] == "burrow receive: error: no code was entered", err


@pytest.mark.parametrize("dilated", [False, True], ids=["classic", "dilated"])
def test_ctrl_c_at_the_question_stops_the_receiver_and_tells_the_sender(wormhole_servers, tmp_path, dilated):
    common = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", wormhole_servers.transit_helper,
              "--hide-progress"]
    (tmp_path / "payload").write_bytes(os.urandom(FILE_SIZE))
    s = burrow("send", *common, *(["--dilated"] if dilated else []), str(tmp_path / "payload"),
               "--code", "4502-purple-sausages")
    controller, terminal = pty.openpty()  # the receiver asks on a terminal, as a person runs it
    try:
        r = burrow("receive", *common, "-o", str(tmp_path / "got"), "4502-purple-sausages", stdin=terminal,
                   stdout=subprocess.DEVNULL, cwd=tmp_path)
        seen = ""
        deadline = time.monotonic() + BOUND
        while "(y/N)" not in seen and time.monotonic() < deadline and r.poll() is None:
            seen += os.read(r.stderr.fileno(), 4096).decode()
        assert "(y/N)" in seen, seen
        r.send_signal(signal.SIGINT)  # what Ctrl-C on that terminal delivers
        _, rest = r.communicate(timeout=BOUND)  # nobody presses Enter: it must stop by itself
        _, serr = s.communicate(timeout=BOUND)
    finally:
        os.close(controller)
        os.close(terminal)
    assert r.returncode == 130 and "Traceback" not in rest, rest
    assert s.returncode == 5, serr
    assert "the receiver was interrupted" in serr.strip().splitlines()[-1], serr
    assert not (tmp_path / "got").is_file() and not (tmp_path / "got" / "payload").exists()  # (dilated: a folder)


def burrow_short(*args: str) -> subprocess.Popen:
    """`burrow` with the wait for a first Dilation connection cut to 3 s."""
    run = ("import sys, burrow.client.apps.dilated_transfer_cli as d; d.FIRST_CONNECTION_TIMEOUT = 3.0; "
           "from burrow.client.cli import main; main(sys.argv[1:])")
    return subprocess.Popen([sys.executable, "-c", run, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_a_dilated_transfer_with_no_path_gives_up_in_bounded_time(wormhole_servers, tmp_path):
    """Dilation itself keeps trying for ever; `burrow send FILE` between burrow peers gives up as a classic
    transfer does (exit 7, both sides) once FIRST_CONNECTION_TIMEOUT (here shortened) passed without a path,
    also while an attempt still hangs: a "relay" holds the first connection and never answers it."""
    r, s, rerr, serr = transfer_at_holding_relay(wormhole_servers, tmp_path, burrow_short, "4504-purple-sausages",
                                                 BOUND)
    assert r.returncode == 7 and s.returncode == 7, (rerr, serr)
    for err, side in ((rerr, "receive"), (serr, "send")):
        last = err.strip().splitlines()[-1]
        assert last.startswith(f"burrow {side}: error: ") and "no transit path" in last and "Traceback" not in err, err
        assert "no Dilation connection within 3 s" in last, err  # one side's own bound, the other told of it
    assert not (tmp_path / "got").exists()
