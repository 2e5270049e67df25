"""`burrow` as a user meets its mistakes: each is one line on stderr and a non-zero exit, never a traceback."""

import os
import re
import subprocess
import sys

import pytest

from harness.haproxy import HAProxy
from harness.ports import free_port

pytestmark = pytest.mark.timeout(120)


def burrow(*args: str, env: dict | None = None, cwd=None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "burrow.client.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd,
                            env={**os.environ, **(env or {})}, **kw)


def finish(p: subprocess.Popen, timeout: float = 60) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def one_line(err: str, prog: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


def test_mailbox_unreachable_says_so_and_exits_4():
    url = f"ws://127.0.0.1:{free_port()}/v1"
    rc, _, err = finish(burrow("send", "--relay-url", url, "--text", "x"))
    assert rc == 4
    assert f"cannot reach the mailbox at {url}; is it running?" in one_line(err, "burrow send")
    rc, _, err = finish(burrow("receive", "--relay-url", url, "1-a-b"))
    assert rc == 4 and f"cannot reach the mailbox at {url}" in one_line(err, "burrow receive")


@pytest.mark.parametrize("args,env,named", [
    (["--relay-url", "http://x/v1"], {}, "'http://x/v1' is not a ws:// or wss:// URL"),
    (["--transit-helper", "relay.example:4001"], {}, "'relay.example:4001' is not tcp:HOST:PORT"),
    ([], {"BURROW_CLIENT_TRANSIT_HELPER": "tcp:host:notaport"},
     "'tcp:host:notaport' is not tcp:HOST:PORT (from BURROW_CLIENT_TRANSIT_HELPER)"),
    ([], {"BURROW_RELAY_URL": "relay.example"}, "'relay.example' is not a ws:// or wss:// URL (from BURROW_RELAY_URL)"),
    (["--code-length", "two"], {}, "--code-length: invalid int value"),
    (["--no-such-flag"], {}, "unrecognized arguments: --no-such-flag"),
])
def test_bad_flags_and_env_values_exit_2(args, env, named):
    rc, _, err = finish(burrow("send", "--text", "x", *args, env=env))
    prog = "burrow" if "unrecognized" in named else "burrow send"  # argparse reports those at the top
    assert rc == 2 and named in one_line(err, prog)


def test_relay_probe_bad_url_is_one_line():
    rc, _, err = finish(burrow("relay-probe", "relay.example.com"))
    assert rc == 2 and "'relay.example.com' is not an https:// or http:// URL" in one_line(err, "burrow relay-probe")


def test_missing_file_exits_2(tmp_path):
    rc, _, err = finish(burrow("send", "--relay-url", "ws://127.0.0.1:1/v1", str(tmp_path / "missing")))
    assert rc == 2 and f"{tmp_path / 'missing'} does not exist" in one_line(err, "burrow send")


def test_unwritable_output_is_one_line(wormhole_servers, tmp_path):
    common = ["--relay-url", wormhole_servers.relay_url, "--transit-helper", wormhole_servers.transit_helper,
              "--hide-progress"]
    (tmp_path / "payload").write_bytes(b"x" * 1000)
    (tmp_path / "a-file").write_text("")
    s = burrow("send", *common, str(tmp_path / "payload"), "--code", "4400-purple-sausages")
    r = burrow("receive", *common, "--accept-file", "-o", str(tmp_path / "a-file" / "out"), "4400-purple-sausages")
    rc, _, err = finish(r)
    src, _, serr = finish(s)
    assert rc == 1 and "a-file" in one_line(err, "burrow receive") and "Traceback" not in err
    assert src == 5 and "the receiver cannot write there" in serr.splitlines()[-1], serr  # told, not left waiting


def test_version_on_every_command_and_help_without_source_paths():
    for command in ([], ["send"], ["receive"], ["forward"], ["relay-probe"], ["netcheck"], ["messaging"]):
        rc, out, err = finish(burrow(*command, "--version"))
        assert rc == 0 and out.startswith("burrow ") and not err, (command, out, err)
    rc, out, _ = finish(burrow("--help"))
    assert rc == 0 and ".py" not in out and "client/" not in out


def test_relay_probe_untrusted_certificate_names_the_fix(tmp_path):
    from harness.processes import burrow as server

    with server("packet_relay", "--dev-tls", "--tls-dir", str(tmp_path / "tls"), "--host", "127.0.0.1",
                "--https-port", "0", "--stun-port", "off", "--admin-port", "0", cwd=tmp_path) as relay:
        port = relay.wait_line(r"relay up: https (\d+)")[1]
        rc, out, _ = finish(burrow("relay-probe", f"https://127.0.0.1:{port}", "--stun-port", "0", "--no-iroh"))
        assert rc == 1 and "FAIL handshake" in out and "--ca-file" in out and "--insecure" in out, out
        rc, out, _ = finish(burrow("relay-probe", f"https://127.0.0.1:{port}", "--stun-port", "0", "--no-iroh",
                                   "--ca-file", str(tmp_path / "tls" / "relay.crt")))
        assert rc == 0 and "ok   handshake" in out, out


@pytest.mark.parametrize("command", [["send"], ["receive"], ["forward"], ["relay-probe"], ["netcheck"],
                                     ["messaging", "listen"], ["messaging", "send"]], ids=" ".join)
def test_every_client_option_shows_its_default(command):
    rc, out, _ = finish(burrow(*command, "--help"))
    assert rc == 0
    options = re.split(r"\n  (?=-)", out.partition("options:")[2])[1:]
    for text in (" ".join(o.split()) for o in options):
        if text.startswith(("-h", "--version", "--key-file")):  # --key-file is required: no default
            continue
        assert text.count("default") == 1, text


@pytest.fixture
def wss_mailbox(wormhole_servers, tmp_path):
    """The test mailbox behind a TLS-terminating haproxy with a self-signed certificate: (wss URL, CA file)."""
    from burrow.packet_relay.tls import generate_self_signed

    cert, key = generate_self_signed(str(tmp_path / "tls"))
    bundle = tmp_path / "tls" / "bundle.pem"
    bundle.write_text(open(cert).read() + open(key).read())
    port = free_port()
    proxy = HAProxy(tmp_path / "haproxy", f"""frontend wss
    bind 127.0.0.1:{port} ssl crt {bundle}
    default_backend mailbox

backend mailbox
    server m1 127.0.0.1:{wormhole_servers.mailbox_port}
""")
    yield f"wss://127.0.0.1:{port}/v1", cert
    proxy.stop()


def test_untrusted_certificate_names_the_fix_and_the_fix_works(wormhole_servers, wss_mailbox, tmp_path):
    url, ca = wss_mailbox
    helper = ["--transit-helper", wormhole_servers.transit_helper]
    rc, _, err = finish(burrow("send", "--relay-url", url, *helper, "--text", "x"))
    line = one_line(err, "burrow send")
    assert rc == 4 and f"the mailbox at {url} has a certificate that is not trusted" in line
    assert "--ca-file" in line and "--insecure" in line
    s = burrow("send", "--relay-url", url, "--ca-file", ca, *helper, "--text", "over tls",
               "--code", "4401-purple-sausages")
    r = burrow("receive", "--relay-url", url, "--insecure", *helper, "4401-purple-sausages")
    rc, out, err = finish(r)
    src, _, serr = finish(s)
    assert rc == 0 and src == 0 and out == "over tls\n", (err, serr)
