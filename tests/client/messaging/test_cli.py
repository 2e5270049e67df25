"""`burrow messaging` exit codes and output format, without servers (the end-to-end runs are test_cli_e2e.py)."""

from __future__ import annotations

import socket

from burrow.client.messaging import cli
from burrow.messaging import keys


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def test_unreachable_discovery_is_exit_4(tmp_path, capsys):
    rc = cli.main(["send", "--discovery", f"http://127.0.0.1:{closed_port()}", "--key-file",
                   str(tmp_path / "k"), "--timeout", "2", keys.SecretKey.generate().public.hex(), "hi"])
    assert rc == cli.EXIT_SERVER
    assert "cannot reach" in capsys.readouterr().err


def test_bad_key_file_and_bad_server_are_usage_errors(tmp_path):
    bad = tmp_path / "bad.key"
    bad.write_text("zz\n")
    assert cli.main(["listen", "--key-file", str(bad)]) == cli.EXIT_USAGE
    assert cli.main(["listen", "--key-file", str(tmp_path / "k"), "--server", "no-port"]) == cli.EXIT_USAGE


def test_key_file_is_created_and_kept(tmp_path):
    path = tmp_path / "me.key"
    cli.main(["listen", "--discovery", f"http://127.0.0.1:{closed_port()}", "--key-file", str(path),
              "--timeout", "1"])
    first = path.read_text()
    cli.main(["listen", "--discovery", f"http://127.0.0.1:{closed_port()}", "--key-file", str(path),
              "--timeout", "1"])
    assert path.read_text() == first and len(first.strip()) == 64


def test_messages_stay_on_one_line():
    assert cli.one_line(b"a\nb\\c\r") == "a\\nb\\\\c\\r"
    assert cli.one_line(b"\xff") == "\ufffd"
