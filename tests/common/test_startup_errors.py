"""The three servers, run as an operator runs them: a mistake ends start-up with one line, never a traceback."""

import re
import socket
import subprocess
import sys

import pytest

from harness.ports import free_port

pytestmark = pytest.mark.timeout(120)

# module, program name, arguments that listen on 127.0.0.1:{port} with every other listener off or ephemeral
SERVERS = [
    ("mailbox_server", "burrow-mailbox", ["--host", "127.0.0.1", "--port", "{port}", "--admin-port", "-1",
                                          "--db", ":memory:"]),
    ("transit_relay", "burrow-transit", ["--host", "127.0.0.1", "--port", "{port}", "--websocket-port", "-1",
                                         "--admin-port", "-1"]),
    ("packet_relay", "burrow-relay", ["--host", "127.0.0.1", "--http-port", "{port}", "--https-port", "-1",
                                      "--stun-port", "0", "--admin-port", "0"]),
    ("discovery", "burrow-discovery", ["--host", "127.0.0.1", "--port", "{port}", "--admin-port", "0"]),
]
IDS = [s[1] for s in SERVERS]


def run(module: str, *args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"burrow.{module}", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=cwd)


def one_line_error(done: subprocess.CompletedProcess, prog: str) -> str:
    """The whole of stderr is one line `PROG: error: ...` (no traceback, no usage dump)."""
    lines = [x for x in done.stderr.splitlines() if " INFO " not in x]  # start-up log lines may precede it
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize("module,prog,args", SERVERS, ids=IDS)
def test_port_in_use_is_one_line_and_exit_1(module, prog, args, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run(module, *(a.format(port=port) for a in args), cwd=tmp_path)
    assert done.returncode == 1
    line = one_line_error(done, prog)
    assert f"cannot listen on 127.0.0.1:{port}: address already in use" in line


@pytest.mark.parametrize("module,prog,args", SERVERS, ids=IDS)
def test_bad_flag_and_env_values_are_one_line_and_exit_2(module, prog, args, tmp_path):
    env_prefix = {"burrow-mailbox": "MAILBOX", "burrow-transit": "TRANSIT", "burrow-relay": "RELAY",
                  "burrow-discovery": "DISCOVERY"}[prog]
    done = run(module, "--admin-port", "nine", cwd=tmp_path)
    assert done.returncode == 2 and "--admin-port: expected int, got 'nine'" in one_line_error(done, prog)
    env = {"PATH": "/usr/bin:/bin", f"BURROW_{env_prefix}_VERBOSE": "perhaps"}
    done = run(module, env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert f"BURROW_{env_prefix}_VERBOSE: expected a boolean" in one_line_error(done, prog)
    done = run(module, "--no-such-flag", cwd=tmp_path)
    assert done.returncode == 2 and "unrecognized arguments: --no-such-flag" in one_line_error(done, prog)


@pytest.mark.parametrize("module,prog,args", SERVERS, ids=IDS)
def test_version_and_help_show_each_default_once(module, prog, args):
    done = run(module, "--version")
    assert done.returncode == 0 and re.fullmatch(rf"{prog} \d+\.\d+\.\d+\S*\n", done.stdout)
    done = run(module, "--help")
    assert done.returncode == 0
    options = re.split(r"\n  (?=--)", done.stdout.partition("options:")[2])[1:]
    assert len(options) > 5
    for text in options:
        text = " ".join(text.split())
        if text.startswith(("--help", "--version", "-h")):
            continue
        assert text.count("default") == 1, text  # every option shows its default, once
        assert "None" not in text and "(default: None)" not in text, text
    joined = " ".join(done.stdout.split())
    assert re.search(r"default: \d+ seconds\)", joined), joined  # durations in seconds, said so


def test_the_report_answers_version_too():
    done = subprocess.run([sys.executable, "-m", "burrow.spark", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and re.fullmatch(r"burrow-report \d+\.\d+\.\d+\S*\n", done.stdout)


def test_relay_names_the_tls_files_and_the_allow_list_it_cannot_read(tmp_path):
    done = run("packet_relay", "--host", "127.0.0.1", "--https-port", "0", "--stun-port", "0", "--admin-port", "0",
               "--tls-cert", str(tmp_path / "missing.crt"), "--tls-key", str(tmp_path / "missing.key"),
               cwd=tmp_path)
    assert done.returncode == 1
    assert f"cannot load the TLS certificate {tmp_path / 'missing.crt'}" in one_line_error(done, "burrow-relay")
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    done = run("packet_relay", "--host", "127.0.0.1", "--https-port", "0", "--stun-port", "0", "--admin-port", "0",
               "--tls-cert", str(tmp_path / "junk.pem"), "--tls-key", str(tmp_path / "junk.pem"), cwd=tmp_path)
    assert done.returncode == 1 and "not a PEM certificate" in one_line_error(done, "burrow-relay")
    done = run("packet_relay", "--host", "127.0.0.1", "--https-port", "-1", "--http-port", str(free_port()),
               "--stun-port", "0", "--admin-port", "0", "--allow-list", str(tmp_path / "allow.txt"), cwd=tmp_path)
    assert done.returncode == 1
    assert f"cannot use {tmp_path / 'allow.txt'}: No such file" in one_line_error(done, "burrow-relay")


def test_every_server_takes_off_for_its_optional_ports(tmp_path):
    from harness.processes import burrow

    for module, args, pattern in [
        ("transit_relay", ["--port", "0", "--websocket-port", "off", "--admin-port", "off"],
         r"transit relay on tcp \S+ websocket None admin None"),
        ("mailbox_server", ["--port", "0", "--admin-port", "off", "--db", ":memory:"], r"admin port None"),
        ("packet_relay", ["--https-port", "off", "--http-port", "0", "--stun-port", "off", "--admin-port", "0"],
         r"relay up: https off http off stun off"),
    ]:
        with burrow(module, "--host", "127.0.0.1", *args, cwd=tmp_path) as server:
            server.wait_line(pattern)


def test_mailbox_names_the_event_log_it_cannot_open(tmp_path):
    (tmp_path / "a-file").write_text("")
    done = run("mailbox_server", "--host", "127.0.0.1", "--port", "0", "--admin-port", "-1", "--db", ":memory:",
               "--event-log", str(tmp_path / "a-file" / "events.jsonl"), cwd=tmp_path)
    assert done.returncode == 1 and "a-file" in one_line_error(done, "burrow-mailbox")
