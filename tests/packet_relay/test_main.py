"""`python -m burrow.packet_relay` as `make run` starts it (signals included), and the relay-probe command."""

import asyncio
import io
import json
import os
import re
import signal
import sys

from burrow.client.apps import relay_probe as probe

from .derp_util import TIMEOUT, ca, running_relay, url


async def test_probe_passes_against_a_live_relay(tmp_path):
    async with running_relay(tmp_path, _stun=True) as server:
        for extra in ([], ["--websocket"]):
            out = io.StringIO()
            args = probe.parse_args([url(server), "--ca-file", ca(server), "--stun-port", str(server.stun_port),
                                     "--count", "3", *extra])
            assert await probe.probe(args, out) == 0, out.getvalue()
            text = out.getvalue()
            assert "ok   handshake" in text and "ok   packets" in text and "ok   ping" in text
            assert re.search(r"ok   stun +mapped address 127\.0\.0\.1:\d+", text)


async def test_probe_fails_on_untrusted_certificate_and_dead_stun(tmp_path):
    async with running_relay(tmp_path) as server:
        out = io.StringIO()
        assert await probe.probe(probe.parse_args([url(server), "--stun-port", "0"]), out) == 1
        assert "FAIL handshake" in out.getvalue() and "CERTIFICATE_VERIFY_FAILED" in out.getvalue()
        out = io.StringIO()
        args = probe.parse_args([url(server), "--insecure", "--stun-port", "9", "--timeout", "0.5"])
        assert await probe.probe(args, out) == 1  # DERP fine, but no STUN answer
        assert "ok   packets" in out.getvalue() and "FAIL stun" in out.getvalue()


async def test_main_runs_with_make_run_arguments_sighup_reloads_and_sigterm_stops(tmp_path):
    from burrow.wire.derp.handshake import generate_private_key, public_key

    log = tmp_path / "logs" / "relay.jsonl"
    keep, drop = generate_private_key(), generate_private_key()
    allow = tmp_path / "allow.txt"
    allow.write_text(f"{public_key(keep).hex()}\n{public_key(drop).hex()}\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "burrow.packet_relay", "--dev-tls", "--tls-dir", str(tmp_path / "tls"),
        "--key-file", str(tmp_path / "relay.key"), "--event-log", str(log), "--allow-list", str(allow),
        "--host", "127.0.0.1", "--https-port", "0", "--stun-port", "0", "--admin-port", "0",
        stderr=asyncio.subprocess.PIPE, cwd=os.getcwd())
    try:
        line = b""
        while b"relay up" not in line:
            line = await asyncio.wait_for(proc.stderr.readline(), TIMEOUT)
            assert line, "relay exited early"
        port = int(re.search(rb"https (\d+)", line).group(1))
        from burrow.client.derp import DerpClient

        opts = dict(ca_file=str(tmp_path / "tls" / "relay.crt"), reconnect=False)
        c = DerpClient(f"https://127.0.0.1:{port}", keep, **opts)
        gone = DerpClient(f"https://127.0.0.1:{port}", drop, **opts)
        await c.start()
        await gone.start()
        allow.write_text(public_key(keep).hex() + "\n")
        proc.send_signal(signal.SIGHUP)  # reload: the key that left the list is disconnected
        await asyncio.wait_for(gone._task, TIMEOUT)
        await gone.close()
        await c.ping(TIMEOUT)
        proc.send_signal(signal.SIGTERM)
        notice = await asyncio.wait_for(c.notices.get(), TIMEOUT)
        assert type(notice).__name__ == "Restarting"
        assert await asyncio.wait_for(proc.wait(), TIMEOUT) == 0
        await c.close()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert (os.stat(tmp_path / "relay.key").st_mode & 0o777) == 0o600
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["close_reason"] for x in lines if x["event"] == "connection"] == ["denied", "shutdown"]
    assert lines[-1]["event"] == "stats"
