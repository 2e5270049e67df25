"""The `burrow` CLI: parser defaults, exit codes, progress bar, and real send/receive processes."""

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from burrow.client import cli, errors
from burrow.client.apps.progress import ProgressBar, human

pytestmark = pytest.mark.timeout(120)


def test_defaults_from_environment(monkeypatch):
    monkeypatch.setenv("BURROW_RELAY_URL", "ws://example:1/v1")  # the older names still work
    monkeypatch.setenv("BURROW_TRANSIT_HELPER", "tcp:example:2")
    args = cli.build_parser().parse_args(["send", "--text", "x"])
    assert args.relay_url == "ws://example:1/v1" and args.transit_helper == "tcp:example:2"
    monkeypatch.setenv("BURROW_CLIENT_MAILBOX_URL", "wss://example:3/v1")  # and the new ones come first
    monkeypatch.setenv("BURROW_CLIENT_TRANSIT_HELPER", "tcp:example:4")
    args = cli.build_parser().parse_args(["send", "--text", "x"])
    assert args.relay_url == "wss://example:3/v1" and args.transit_helper == "tcp:example:4"
    for name in ("BURROW_RELAY_URL", "BURROW_TRANSIT_HELPER", "BURROW_CLIENT_MAILBOX_URL",
                 "BURROW_CLIENT_TRANSIT_HELPER"):
        monkeypatch.delenv(name)
    args = cli.build_parser().parse_args(["receive", "--accept-file", "-o", "out", "1-a-b"])
    assert args.relay_url == cli.DEFAULT_RELAY_URL and args.transit_helper == cli.DEFAULT_TRANSIT_HELPER
    assert args.code == "1-a-b" and str(args.output_file) == "out"


def test_messaging_discovery_url_from_environment(monkeypatch):
    from burrow.client.messaging.cli import build_parser

    monkeypatch.setenv("BURROW_DISCOVERY_URL", "http://old:1")  # the older name still works
    assert build_parser().parse_args(["listen", "--key-file", "k"]).discovery == "http://old:1"
    monkeypatch.setenv("BURROW_CLIENT_DISCOVERY_URL", "http://new:2")  # the client's own name comes first
    assert build_parser().parse_args(["listen", "--key-file", "k"]).discovery == "http://new:2"


@pytest.mark.parametrize("exc,code", [
    (errors.WrongCodeError(), 3), (errors.ServerConnectionError("x"), 4), (errors.ServerError("crowded"), 4),
    (errors.WelcomeError("x"), 4), (errors.TransferRejected("x"), 5), (errors.TransferError("remote error: "
                                                                                               "transfer rejected"), 5),
    (errors.LonelyError("x"), 6), (errors.PeerGoneError("x"), 6), (errors.TransitError("x"), 7),
    (errors.TransferError("bad hash"), 1), (errors.CodeFormatError("x"), 2)])
def test_exit_codes(exc, code):
    assert cli.exit_code_for(exc) == code


def test_progress_bar_rate_and_eta():
    now = [100.0]
    out = io.StringIO()
    bar = ProgressBar(out, enabled=True, clock=lambda: now[0])
    bar(0, 100_000_000)
    now[0] = 102.0
    line = bar.render(50_000_000, 100_000_000, now[0])
    assert "50.0%" in line and "25.0 MB/s" in line and "ETA 0:00:02" in line
    bar(100_000_000, 100_000_000)
    bar.finish()
    assert out.getvalue().endswith("\n") and "100.0%" in out.getvalue()
    assert human(999) == "999 B" and human(1_500_000) == "1.5 MB"


def test_hidden_progress_writes_nothing():
    out = io.StringIO()
    bar = ProgressBar(out, enabled=False)
    bar(1, 2)
    bar.finish()
    assert out.getvalue() == ""


def _burrow(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "burrow.client.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def test_cli_text_roundtrip_and_wrong_code(wormhole_servers, tmp_path):
    common = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", wormhole_servers.transit_helper]
    s = _burrow("send", *common, "--text", "multi\nline ✓", "--code", "4321-purple-sausages")
    r = _burrow("receive", *common, "4321-purple-sausages", cwd=tmp_path)
    rout, rerr = r.communicate(timeout=60)
    sout, serr = s.communicate(timeout=60)
    assert r.returncode == 0 and s.returncode == 0, (rerr, serr)
    assert "multi\\nline ✓" in rout  # escaped like magic-wormhole, one line
    assert "Wormhole code is: 4321-purple-sausages" in serr
    s = _burrow("send", *common, "--text", "x", "--code", "4322-purple-sausages")
    r = _burrow("receive", *common, "4322-purple-sausage", cwd=tmp_path)
    r.communicate(timeout=60)
    s.communicate(timeout=60)
    assert r.returncode == 3 and s.returncode == 3


def _burrow_file_transfer(servers, tmp_path, code: str, *receive_flags: str,
                          send_flags: tuple[str, ...] = ()) -> tuple[str, str, str]:
    """burrow send -> burrow receive of a 300 kB file; returns (its SHA-256, sender's and receiver's stderr)."""
    common = ["--relay-url", servers.relay_url, "--transit-helper", servers.transit_helper, "--hide-progress"]
    src = tmp_path / "payload.bin"
    src.write_bytes(os.urandom(300_000))
    got = tmp_path / f"got-{code}.bin"
    s = _burrow("send", *common, *send_flags, str(src), "--code", code)
    r = _burrow("receive", *common, "--accept-file", *receive_flags, "-o", str(got), code, cwd=tmp_path)
    rout, rerr = r.communicate(timeout=60)
    sout, serr = s.communicate(timeout=60)
    assert r.returncode == 0 and s.returncode == 0, (rerr, serr)
    assert got.read_bytes() == src.read_bytes()
    return hashlib.sha256(src.read_bytes()).hexdigest(), serr, rerr


def test_cli_burrow_to_burrow_receive_does_not_hash(wormhole_servers, tmp_path):
    """A burrow sender says it needs no SHA-256: the receiver computes none, so neither side prints one (the
    ack carries none for the sender to print)."""
    digest, serr, rerr = _burrow_file_transfer(wormhole_servers, tmp_path, "4323-purple-sausages")
    assert "Transfer complete (" in serr and "SHA-256" not in serr and "sha256" not in rerr
    assert f"written to {tmp_path / 'got-4323-purple-sausages.bin'}\n" in rerr


@pytest.mark.parametrize("send_flags", [(), ("--classic",)], ids=["dilated", "classic"])
def test_cli_receive_sha256_flag_hashes_and_the_sender_reports_it(wormhole_servers, tmp_path, send_flags):
    digest, serr, rerr = _burrow_file_transfer(wormhole_servers, tmp_path, "4324-purple-sausages", "--sha256",
                                               send_flags=send_flags)
    assert f"the receiver wrote SHA-256 {digest}" in serr
    assert f"(sha256 {digest})" in rerr


def test_cli_burrow_to_burrow_default_is_dilated(wormhole_servers, tmp_path):
    """`burrow send FILE` to a burrow receiver: a Dilated transfer, with a classic transfer's lines and -o."""
    _, serr, rerr = _burrow_file_transfer(wormhole_servers, tmp_path, "4326-purple-sausages")
    assert "Sending (Dilation, " in serr and "Receiving (Dilation, " in rerr, (serr, rerr)
    assert "Transfer complete (Dilation, " in serr and "Connected" not in serr + rerr


def test_cli_classic_flag_forces_classic(wormhole_servers, tmp_path):
    _, serr, rerr = _burrow_file_transfer(wormhole_servers, tmp_path, "4327-purple-sausages",
                                          send_flags=("--classic",))
    assert "Dilation" not in serr + rerr and "Sending (direct " in serr and "Receiving (direct " in rerr, (serr, rerr)


def test_cli_burrow_to_burrow_directory_with_output_path(wormhole_servers, tmp_path):
    """A directory over Dilation lands at -o, as a classic (zipped) one does, nested files included."""
    common = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", wormhole_servers.transit_helper,
              "--hide-progress"]
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    files = {"a.bin": os.urandom(70_000), "sub/b.txt": b"nested\n"}
    for name, data in files.items():
        (src / name).write_bytes(data)
    got = tmp_path / "elsewhere" / "copy"
    s = _burrow("send", *common, str(src), "--code", "4328-purple-sausages")
    r = _burrow("receive", *common, "--accept-file", "-o", str(got), "4328-purple-sausages", cwd=tmp_path)
    _, rerr = r.communicate(timeout=60)
    _, serr = s.communicate(timeout=60)
    assert r.returncode == 0 and s.returncode == 0, (rerr, serr)
    assert "Sending directory 'tree'" in serr and "Sending (Dilation, " in serr
    assert f"Received directory written to {got}\n" in rerr, rerr
    for name, data in files.items():
        assert (got / name).read_bytes() == data


def test_cli_existing_target_is_refused_as_in_a_classic_transfer(wormhole_servers, tmp_path):
    """--accept-file never overwrites: the receiver says so and both sides exit 5 (rejected)."""
    common = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", wormhole_servers.transit_helper,
              "--hide-progress"]
    (tmp_path / "payload.bin").write_bytes(b"new")
    got = tmp_path / "got.bin"
    got.write_bytes(b"old")
    s = _burrow("send", *common, str(tmp_path / "payload.bin"), "--code", "4329-purple-sausages")
    r = _burrow("receive", *common, "--accept-file", "-o", str(got), "4329-purple-sausages", cwd=tmp_path)
    _, rerr = r.communicate(timeout=60)
    _, serr = s.communicate(timeout=60)
    assert r.returncode == 5 and s.returncode == 5, (rerr, serr)
    assert f"{got} already exists." in rerr and rerr.strip().splitlines()[-1] == (
        f"burrow receive: error: refusing to overwrite {got}"), rerr
    assert serr.strip().splitlines()[-1].startswith("burrow send: error: ") and "rejected" in serr, serr
    assert got.read_bytes() == b"old"


def test_cli_dilated_flag_to_magic_wormhole_fails_clearly(wormhole_servers, tmp_path):
    """--dilated to a receiver that cannot take it: the sender says why and the receiver hears of it."""
    (tmp_path / "payload.bin").write_bytes(b"x" * 1000)
    code = "4330-purple-sausages"
    s = _burrow("send", "--relay-url", wormhole_servers.relay_url, "--transit-helper",
                wormhole_servers.transit_helper, "--hide-progress", "--dilated", str(tmp_path / "payload.bin"),
                "--code", code)
    r = subprocess.Popen([str(Path(sys.executable).parent / "wormhole"), "--relay-url", wormhole_servers.relay_url,
                          "--transit-helper", wormhole_servers.transit_helper, "receive", "--hide-progress",
                          "--accept-file", code], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    rout, _ = r.communicate(timeout=60)
    _, serr = s.communicate(timeout=60)
    assert s.returncode == 1 and "cannot receive a Dilated transfer" in serr.strip().splitlines()[-1], serr
    assert r.returncode != 0 and "Dilated" in rout, rout
    assert not (tmp_path / "payload.bin.part").exists()


def test_cli_magic_wormhole_sender_still_gets_the_sha256(wormhole_servers, tmp_path):
    """magic-wormhole 0.24 says nothing about the digest: burrow hashes and acknowledges with it, as always."""
    src = tmp_path / "payload.bin"
    src.write_bytes(os.urandom(300_000))
    got = tmp_path / "got.bin"
    code = "4325-purple-sausages"
    s = subprocess.Popen([str(Path(sys.executable).parent / "wormhole"), "--relay-url", wormhole_servers.relay_url,
                          "--transit-helper", wormhole_servers.transit_helper, "send", "--hide-progress",
                          "--code", code, str(src)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    r = _burrow("receive", "--relay-url", wormhole_servers.relay_url, "--transit-helper",
                wormhole_servers.transit_helper, "--hide-progress", "--accept-file", "-o", str(got), code,
                cwd=tmp_path)
    rout, rerr = r.communicate(timeout=60)
    sout, _ = s.communicate(timeout=60)
    assert r.returncode == 0 and s.returncode == 0, (rerr, sout)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    assert got.read_bytes() == src.read_bytes() and f"(sha256 {digest})" in rerr


def test_cli_usage_errors(tmp_path):
    p = _burrow("send", "--relay-url", "ws://127.0.0.1:1/v1", str(tmp_path / "missing"))
    p.communicate(timeout=30)
    assert p.returncode == 2
    p = _burrow("send", "--relay-url", "ws://127.0.0.1:1/v1", "--text", "x")
    _, err = p.communicate(timeout=30)
    assert p.returncode == 4 and "error" in err


def test_cli_send_dilated_many_files(wormhole_servers, tmp_path):
    """`burrow send --dilated A B` to a plain `burrow receive`: the receiver recognises the dilated offer."""

    src = tmp_path / "src"
    src.mkdir()
    files = {"a.bin": os.urandom(300_000), "b.txt": b"hello dilation\n"}
    for name, data in files.items():
        (src / name).write_bytes(data)
    out = tmp_path / "out"
    common = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", wormhole_servers.transit_helper,
              "--hide-progress"]
    s = _burrow("send", *common, "--dilated", str(src / "a.bin"), str(src / "b.txt"),
                "--code", "4323-purple-sausages")
    r = _burrow("receive", *common, "--accept-file", "-o", str(out), "4323-purple-sausages")
    rout, rerr = r.communicate(timeout=90)
    sout, serr = s.communicate(timeout=90)
    assert r.returncode == 0 and s.returncode == 0, (rerr, serr)
    assert "generation" not in serr + rerr and "Connected (" in serr  # no internal state names
    for name, data in files.items():
        assert hashlib.sha256((out / name).read_bytes()).digest() == hashlib.sha256(data).digest()


def test_the_installed_burrow_command_sends_and_exits_with_the_commands_status(wormhole_servers, tmp_path):
    """The `burrow` script (client/entry.py: the collector kept off the start-up's objects) runs the command
    line unchanged: a transfer's output and a usage error's exit status come through."""
    burrow = Path(sys.executable).parent / "burrow"
    common = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", wormhole_servers.transit_helper]
    s = subprocess.Popen([burrow, "send", *common, "--text", "through the script", "--code", "4391-purple-sausages"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    r = subprocess.run([burrow, "receive", *common, "4391-purple-sausages"], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    s.communicate(timeout=60)
    assert r.returncode == 0 and s.returncode == 0, r.stderr
    assert r.stdout == "through the script\n"
    bad = subprocess.run([burrow, "send", "--no-such-flag"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr
