"""Real iroh endpoints (PyPI iroh==1.2.0) through our packet relay, inside a private network namespace.

The pytest test runs this file as a driver under `unshare -n` (root needed): loopback up, loopback
UDP dropped (iptables + ip6tables) so iroh cannot move to a direct path, then our relay
(`python -m burrow.packet_relay`, plain http://) and iroh endpoints (tests/interop/iroh_peer.py, each a
subprocess) inside it. The driver prints one JSON report; the test checks it. iroh endpoints never
run outside the namespace: their port mapper would probe the real network.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from harness.ports import free_port
from harness.processes import stop

ROOT = Path(__file__).resolve().parents[2]
PEER = Path(__file__).with_name("iroh_peer.py")
NBYTES = 2 * 1024 * 1024
DRIVER_TIMEOUT = 240
DIAL_BOUND = 45.0   # our outer bound; iroh 1.2.0 gives up by itself after about 30 s


# ---------------------------------------------------------------- driver (runs inside the netns)
def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, timeout=10, capture_output=True)


def _metric(admin_port: int, name: str, labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=5).read().decode()
    m = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


class Relay:
    def __init__(self, tmp: Path, name: str, *extra: str) -> None:
        self.port, self.admin = free_port(), free_port()
        self.log = tmp / f"{name}.jsonl"
        cmd = [sys.executable, "-m", "burrow.packet_relay", "--host", "127.0.0.1",
               "--http-port", str(self.port), "--https-port", "-1", "--stun-port", "0",
               "--admin-port", str(self.admin),
               "--event-log", str(self.log), "--key-file", str(tmp / f"{name}.key"), *extra]
        self.stderr = open(tmp / f"{name}.stderr", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self.stderr)
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/readyz", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"relay {name} did not start") from None
                time.sleep(0.1)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> int:
        code = stop(self.proc, 15)
        self.stderr.close()
        return code

    def events(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


def _peer(*args: str, timeout: float = 120) -> dict:
    out = subprocess.run([sys.executable, str(PEER), *args], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": f"exit {out.returncode}", "stderr": out.stderr[-2000:]}
    return json.loads(lines[-1])


def _dial_with_relay_stopped(relay: Relay, seconds: float) -> dict:
    proc = subprocess.Popen([sys.executable, str(PEER), "dial", relay.url, str(seconds)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # {"phase": ...} once the control dial is done
        result: dict = {"phase": json.loads(first) if first.startswith("{") else first[-500:]}
        result["relay_exit"] = relay.stop()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return {"error": "dial driver timed out"}
    lines = [x for x in out.splitlines() if x.startswith("{")]
    result.update(json.loads(lines[-1]) if lines else {"error": err[-2000:]})
    return result


def drive() -> dict:
    _sh("ip", "link", "set", "lo", "up")
    _sh("/usr/sbin/iptables", "-A", "INPUT", "-i", "lo", "-p", "udp", "-j", "DROP")
    _sh("/usr/sbin/ip6tables", "-A", "INPUT", "-i", "lo", "-p", "udp", "-j", "DROP")
    tmp = Path(tempfile.mkdtemp(prefix="iroh-interop-"))
    report: dict = {}
    try:
        # 1. two endpoints exchange NBYTES each way through the relay; our metrics show the bytes
        relay = Relay(tmp, "open")
        try:
            report["pair"] = _peer("pair", relay.url, str(NBYTES), timeout=150)
            report["forwarded_bytes"] = _metric(relay.admin, "burrow_relay_forwarded_bytes_total",
                                                'protocol="iroh"')
        finally:
            relay.stop()
        report["pair_events"] = [e for e in relay.events() if e["event"] == "connection"]
        # 2. allow-list + bearer token: a listed endpoint with the token comes online; without the
        #    token, or not listed, it cannot
        listed = os.urandom(32)
        from nacl.signing import SigningKey  # the endpoint id is the Ed25519 public key of the secret

        allow = tmp / "allow.txt"
        allow.write_text(f"# iroh endpoints\nendpoint:{bytes(SigningKey(listed).verify_key).hex()}\n")
        tokens = tmp / "tokens.txt"
        tokens.write_text("s3cret-token\n")
        relay = Relay(tmp, "guarded", "--allow-list", str(allow), "--iroh-tokens-file", str(tokens))
        try:
            report["listed"] = _peer("online", relay.url, "15", "--secret", listed.hex(), "--token", "s3cret-token")
            report["unlisted"] = _peer("online", relay.url, "8", "--token", "s3cret-token")
            report["no_token"] = _peer("online", relay.url, "8", "--secret", listed.hex())
            for source in ("allow_list", "token"):
                report[f"denied_{source}"] = _metric(relay.admin, "burrow_relay_access_denied_total",
                                                     f'protocol="iroh",source="{source}"')
        finally:
            relay.stop()
        # 3. a stopped relay makes a relay-only dial fail within a bounded time
        relay = Relay(tmp, "dial")
        report["dial"] = _dial_with_relay_stopped(relay, DIAL_BOUND)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


# ---------------------------------------------------------------- the pytest side
def _can_unshare() -> bool:
    return (os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("ip") is not None
            and os.path.exists("/usr/sbin/iptables") and os.path.exists("/usr/sbin/ip6tables"))


@pytest.fixture(scope="module")
def report() -> dict:
    import iroh  # noqa: F401 - a test dependency: pip install -e .[test]
    if not _can_unshare():
        pytest.fail("this test needs root, unshare, ip and iptables/ip6tables (see .ci/run)")
    out = subprocess.run(["unshare", "-n", sys.executable, __file__], cwd=ROOT, capture_output=True,
                         text=True, timeout=DRIVER_TIMEOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_two_iroh_endpoints_exchange_2mb_each_way_through_our_relay(report):
    pair = report["pair"]
    assert pair.get("ok") is True, pair
    assert pair["bytes_each_way"] == NBYTES
    assert pair["paths"] and all(p["relay"] for p in pair["paths"] if p["selected"]), pair["paths"]
    # QUIC adds headers and acks, so the relay carries more than the application bytes
    assert report["forwarded_bytes"] >= 2 * NBYTES
    conns = [e for e in report["pair_events"] if e["protocol"] == "iroh"]
    assert len(conns) >= 2 and all(e["transport"] == "websocket" and not e["tls"] for e in conns)
    assert sum(e["bytes_in"] for e in conns) >= 2 * NBYTES


@pytest.mark.slow
def test_allow_list_and_token_admit_only_the_listed_endpoint_with_the_token(report):
    assert report["listed"].get("online") is True, report["listed"]
    assert report["unlisted"].get("online") is False, report["unlisted"]
    assert report["no_token"].get("online") is False, report["no_token"]
    assert report["denied_allow_list"] >= 1
    assert report["denied_token"] >= 1


@pytest.mark.slow
def test_relay_only_dial_fails_in_bounded_time_when_relay_stopped(report):
    dial = report["dial"]
    assert dial.get("control") == "connected", dial
    assert dial["relay_exit"] == 0
    # iroh's own error (not our outer asyncio timeout) ends the dial, well inside the bound
    assert dial["outcome"].startswith("error"), dial
    assert dial["seconds"] < DIAL_BOUND


if __name__ == "__main__":
    print(json.dumps(drive()), flush=True)
