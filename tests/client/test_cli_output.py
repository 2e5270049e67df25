"""What `burrow` prints in normal use: commands that work when pasted, no internal names, tidy progress bars."""

import io
import os
import re
import shlex
import socket
import subprocess
import sys

import pytest

from burrow.client import cli
from burrow.client.apps import forward
from burrow.client.apps.progress import ERASE_TO_END, ProgressBar
from harness.processes import VENV_BIN

pytestmark = pytest.mark.timeout(120)


def burrow(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "burrow.client.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def pasted(line: str) -> list[str]:
    """The printed `burrow ...` command as the installed console script would run it."""
    words = shlex.split(line)
    assert words[0] == "burrow", line
    return [str(VENV_BIN / "burrow"), *words[1:]]


def read_until(stream, pattern: str, limit: int = 50) -> tuple[re.Match, str]:
    seen = ""
    for _ in range(limit):
        line = stream.readline()
        seen += line
        found = re.search(pattern, line)
        if found:
            return found, seen
    raise AssertionError(f"no line matching {pattern!r} in {seen!r}")


def test_please_run_names_the_servers_only_when_they_are_not_the_defaults():
    parser = cli.build_parser()
    args = parser.parse_args(["send", "--text", "x"])
    assert cli.peer_command(args, "receive", "7-a-b") == "burrow receive 7-a-b"
    args = parser.parse_args(["send", "--relay-url", "wss://mb.example/v1", "--transit-helper", "tcp:tr.example:4001",
                              "--text", "x"])
    assert cli.peer_command(args, "receive", "7-a-b") == ("burrow receive --relay-url wss://mb.example/v1 "
                                                          "--transit-helper tcp:tr.example:4001 7-a-b")


def test_the_printed_receive_command_works_as_pasted(wormhole_servers, tmp_path):
    # our test servers are not on the default ports, so the line must name them
    s = burrow("send", "--relay-url", wormhole_servers.relay_url, "--transit-helper", wormhole_servers.transit_helper,
               "--text", "pasted")
    _, seen = read_until(s.stderr, r"On the other computer, please run")
    line = ""
    while not line.strip():
        line = s.stderr.readline()
    assert f"--relay-url {wormhole_servers.relay_url}" in line and wormhole_servers.transit_helper in line
    r = subprocess.run(pasted(line), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    s.communicate(timeout=60)
    assert r.returncode == 0 and r.stdout == "pasted\n" and s.returncode == 0, r.stderr


def test_forward_help_says_how_to_use_it():
    done = subprocess.run([sys.executable, "-m", "burrow.client.cli", "forward", "--help"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0
    assert "burrow forward --allow 127.0.0.1:8000" in done.stdout
    assert "burrow forward --code CODE --local 9000:127.0.0.1:8000" in done.stdout
    assert "4-byte" not in done.stdout and "subchannel" not in done.stdout and "JSON" not in done.stdout


def test_forward_tells_the_other_side_what_to_run():
    args = forward.build_parser().parse_args(["--allow", "127.0.0.1:8000", "--allow", "db:5432"])
    assert forward.peer_command(args, "7-a-b") == ("burrow forward --code 7-a-b --local 8000:127.0.0.1:8000 "
                                                   "--local 5432:db:5432")
    args = forward.build_parser().parse_args(["--local", "9000:127.0.0.1:8000", "--relay-url", "ws://m:1/v1"])
    assert forward.peer_command(args, "7-a-b") == ("burrow forward --relay-url ws://m:1/v1 --code 7-a-b "
                                                   "--allow 127.0.0.1:8000")


def test_forward_printed_command_works_and_no_state_names(wormhole_servers):
    with socket.socket() as target:  # the service the other side reaches
        target.bind(("127.0.0.1", 0))
        target.listen()
        port = target.getsockname()[1]
        a = burrow("forward", "--relay-url", wormhole_servers.relay_url, "--transit-helper",
                   wormhole_servers.transit_helper, "--local", f"0:127.0.0.1:{port}")
        b = None
        try:
            _, seen = read_until(a.stderr, r"On the other computer, please run")
            line = ""
            while not line.strip():
                line = a.stderr.readline()
            assert f"--allow 127.0.0.1:{port}" in line
            b = subprocess.Popen(pasted(line), stderr=subprocess.PIPE, text=True)
            found, more = read_until(a.stderr, r"Forwarding 127.0.0.1:(\d+) to 127.0.0.1:\d+ on the other computer")
            seen += more
            with socket.create_connection(("127.0.0.1", int(found[1])), timeout=30) as c:
                c.sendall(b"hello")
                served, _ = target.accept()
                with served:
                    served.settimeout(30)
                    assert served.recv(5) == b"hello"
        finally:
            for p in (a, b):
                if p is not None:
                    p.terminate()
                    p.communicate(timeout=30)
    assert "dilation:" not in seen and "generation" not in seen  # was "dilation: connected ... (generation 1)"


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_rate_from_the_first_byte_erases_and_ends_its_line():
    now = [100.0]
    out = FakeTerminal()
    bar = ProgressBar(out, clock=lambda: now[0])
    now[0] = 160.0  # a minute at the (y/N) question: not part of the rate
    bar(0, 100_000_000)
    now[0] = 162.0
    bar(50_000_000, 100_000_000)
    assert "25.0 MB/s" in out.getvalue() and "ETA 0:00:02" in out.getvalue()
    assert all(part.endswith(ERASE_TO_END) for part in out.getvalue().split("\r") if part)
    bar.finish()
    bar.finish()
    assert out.getvalue().endswith("\n") and not out.getvalue().endswith("\n\n")


def test_no_progress_bar_when_stderr_is_not_a_terminal(wormhole_servers, tmp_path):
    out = io.StringIO()
    bar = ProgressBar(out)
    bar(1, 2)
    bar.finish()
    assert out.getvalue() == ""
    common = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", wormhole_servers.transit_helper]
    (tmp_path / "payload").write_bytes(os.urandom(3_000_000))
    s = burrow("send", *common, str(tmp_path / "payload"), "--code", "4600-purple-sausages")
    r = burrow("receive", *common, "--accept-file", "-o", str(tmp_path / "got"), "4600-purple-sausages")
    _, rerr = r.communicate(timeout=60)
    _, serr = s.communicate(timeout=60)
    assert r.returncode == 0 and s.returncode == 0, (rerr, serr)
    assert "\r" not in rerr and "\r" not in serr and "%" not in rerr + serr
