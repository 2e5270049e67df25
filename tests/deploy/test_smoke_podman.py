"""Smoke test: build the images, run docker/compose.yaml through the Docker Engine API (podman serves
it), and move real files through the containers with magic-wormhole and with our client; probe the DERP
relay, STUN and QUIC address discovery; run the Spark report profile over the shared log volume.

Needs Linux, root, podman + runc (Debian packages) and, when no registry is reachable, debootstrap.
Where they are missing the whole module is skipped with the reason (and a warning in the summary).
Bounded: every wait has a deadline; a warm cache (base image, layers) makes it a couple of minutes.
"""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.ports import free_port
from tests.deploy.podman_stack import (
    Stack,
    base_image,
    build,
    cache_dir,
    missing_prerequisites,
    note,
    podman_service,
    wheelhouse,
)

pytestmark = [pytest.mark.slow, pytest.mark.interop, pytest.mark.timeout(1500)]

REASON = missing_prerequisites()
if REASON:  # never a silent skip: the images are part of the product
    pytest.fail(f"podman smoke test cannot run: {REASON}", pytrace=False)

BIN = Path(sys.executable).parent
SERVER_IMAGE = "localhost/burrow-smoke:test"
REPORT_IMAGE = "localhost/burrow-report-smoke:test"
SERVICES = ["mailbox", "transit", "relay"]
FILE_SIZE = 1 << 20


@dataclass
class Deployed:
    client: Any
    stack: Stack
    ports: dict[str, int]
    work: Path
    log: Path
    base: str
    pip_url: str

    def url(self, name: str, path: str = "") -> str:
        return f"http://127.0.0.1:{self.ports[name]}{path}"

    @property
    def relay_url(self) -> str:
        return f"ws://127.0.0.1:{self.ports['mailbox']}/v1"

    @property
    def transit_helper(self) -> str:
        return f"tcp:127.0.0.1:{self.ports['transit']}"

    def metric(self, service: str, sample: str) -> float:
        with urllib.request.urlopen(self.url(f"{service}_admin", "/metrics"), timeout=5) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(sample + " ") or line.startswith(sample + "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total


def wait_ready(url: str, deadline: float, stack: Stack) -> None:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{url} not ready in time\n{stack.logs()}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    work = tmp_path_factory.mktemp("podman")
    log = cache_dir() / "smoke.log"  # outside pytest's rotating tmp dirs, for CI post-mortems
    log.write_text("")
    print(f"\nsmoke test log: {log}")
    with podman_service(work, log) as client:
        base = base_image(client, log)
        with wheelhouse(work, "[spark]", log) as pip_url:
            build(client, "docker/Dockerfile", SERVER_IMAGE, base, pip_url, log)
            ports = {"mailbox": free_port(), "mailbox_admin": free_port(), "transit": free_port(),
                     "transit_ws": free_port(), "transit_admin": free_port(), "relay_https": free_port(),
                     "relay_stun": free_port(socket.SOCK_DGRAM), "relay_qad": free_port(socket.SOCK_DGRAM),
                     "relay_admin": free_port()}
            env = {
                "BURROW_PUBLISH_MAILBOX": f"127.0.0.1:{ports['mailbox']}",
                "BURROW_PUBLISH_MAILBOX_ADMIN": str(ports["mailbox_admin"]),
                "BURROW_PUBLISH_TRANSIT": f"127.0.0.1:{ports['transit']}",
                "BURROW_PUBLISH_TRANSIT_WS": f"127.0.0.1:{ports['transit_ws']}",
                "BURROW_PUBLISH_TRANSIT_ADMIN": str(ports["transit_admin"]),
                "BURROW_PUBLISH_RELAY_HTTPS": f"127.0.0.1:{ports['relay_https']}",
                "BURROW_PUBLISH_RELAY_STUN": f"127.0.0.1:{ports['relay_stun']}",
                "BURROW_PUBLISH_RELAY_QAD": f"127.0.0.1:{ports['relay_qad']}",
                "BURROW_PUBLISH_RELAY_ADMIN": str(ports["relay_admin"]),
                "BURROW_NODE_NAME": "smoke",
            }
            images = {name: SERVER_IMAGE for name in SERVICES} | {"report": REPORT_IMAGE}
            stack = Stack(client, f"burrowsmoke{os.getpid()}", env, images)
            try:
                stack.up(SERVICES)
                note(log, "stack started")
                deadline = time.monotonic() + 90
                for name in SERVICES:
                    wait_ready(f"http://127.0.0.1:{ports[name + '_admin']}/readyz", deadline, stack)
                note(log, "stack ready")
                yield Deployed(client, stack, ports, work, log, base, pip_url)
            finally:
                stack.down()


def run(argv: list[str], **kw: Any) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def transfer(deployed: Deployed, sender: list[str], receiver: list[str], tmp: Path, code: str) -> None:
    """Send a random file from one CLI to the other through the containers' mailbox and transit relay."""
    payload = os.urandom(FILE_SIZE)
    src = tmp / "payload.bin"
    src.write_bytes(payload)
    dst = tmp / "received.bin"
    relayed_before = deployed.metric("transit", "burrow_transit_relayed_bytes_total")
    send = run([*sender, str(src)], cwd=tmp)
    time.sleep(1.0)  # let the sender claim the nameplate first
    recv = run([*receiver, str(dst), code], cwd=tmp)
    try:
        recv_out, _ = recv.communicate(timeout=120)
        send_out, _ = send.communicate(timeout=60)
    finally:
        for p in (send, recv):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert recv.returncode == 0 and send.returncode == 0, (
        f"sender: {send_out}\nreceiver: {recv_out}\n{deployed.stack.logs()}")
    assert hashlib.sha256(dst.read_bytes()).digest() == hashlib.sha256(payload).digest()
    # --no-listen on both sides: the bytes went through the transit relay container
    assert deployed.metric("transit", "burrow_transit_relayed_bytes_total") >= relayed_before + FILE_SIZE


def test_images_are_nonroot_healthchecked_and_lean(deployed):
    attrs = deployed.client.api.inspect_image(SERVER_IMAGE)
    assert attrs["Config"]["User"] == "10001:10001"
    for name in SERVICES:
        container = deployed.stack.containers[name]
        container.reload()
        assert container.status == "running"
        test = container.attrs["Config"]["Healthcheck"]["Test"]
        assert test[0] == "CMD" and "burrow-healthcheck" in test[-1]
        code, out = container.exec_run(test[1:])
        assert code == 0, out
        code, out = container.exec_run(["id", "-u"])
        assert out.decode().strip() == "10001"
    mailbox = deployed.stack.containers["mailbox"]
    code, _ = mailbox.exec_run(["sh", "-c", "command -v gcc || command -v cc || test -e /opt/burrow/bin/pip"])
    assert code != 0, "the final image carries a compiler or pip"
    code, out = mailbox.exec_run(["sh", "-c", "touch /etc/burrow/x"])
    assert code != 0, "the root filesystem is read-only (/etc/burrow is owned by the user)"


def test_magic_wormhole_file_through_containers(deployed, tmp_path):
    code = "7-smoke-wormhole"
    common = [str(BIN / "wormhole"), "--relay-url", deployed.relay_url, "--transit-helper", deployed.transit_helper]
    transfer(deployed, [*common, "send", "--no-listen", "--hide-progress", "--code", code],
             [*common, "receive", "--no-listen", "--hide-progress", "--accept-file", "-o"], tmp_path, code)


def test_burrow_client_file_through_containers(deployed, tmp_path):
    code = "8-smoke-burrow"
    common = ["--relay-url", deployed.relay_url, "--transit-helper", deployed.transit_helper, "--no-listen",
              "--hide-progress"]
    transfer(deployed, [str(BIN / "burrow"), "send", *common, "--code", code],
             [str(BIN / "burrow"), "receive", *common, "--accept-file", "-o"], tmp_path, code)


def test_burrow_and_magic_wormhole_interoperate_through_containers(deployed, tmp_path):
    code = "9-smoke-cross"
    wormhole = [str(BIN / "wormhole"), "--relay-url", deployed.relay_url, "--transit-helper",
                deployed.transit_helper]
    ours = ["--relay-url", deployed.relay_url, "--transit-helper", deployed.transit_helper, "--no-listen",
            "--hide-progress"]
    transfer(deployed, [str(BIN / "burrow"), "send", *ours, "--code", code],
             [*wormhole, "receive", "--no-listen", "--hide-progress", "--accept-file", "-o"], tmp_path, code)


def test_derp_relay_and_stun_through_containers(deployed):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the compose default is a self-signed certificate
    with urllib.request.urlopen(f"https://127.0.0.1:{deployed.ports['relay_https']}/generate_204", timeout=10,
                                context=ctx) as r:
        assert r.status == 204
    probe = subprocess.run(
        [str(BIN / "burrow"), "relay-probe", f"https://127.0.0.1:{deployed.ports['relay_https']}", "--insecure",
         "--stun-host", "127.0.0.1", "--stun-port", str(deployed.ports["relay_stun"]), "--count", "3"],
        capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stdout + probe.stderr + deployed.stack.logs()
    assert deployed.metric("relay", "burrow_relay_stun_answered_total") >= 1
    assert deployed.metric("relay", "burrow_relay_packets_forwarded_total") >= 1


def test_quic_address_discovery_through_containers(deployed):
    """iroh's QAD on compose.yaml's published UDP port, with the relay's (self-signed) HTTPS certificate."""
    import asyncio

    from burrow.client.nat.qad import observe

    seen = asyncio.run(observe("127.0.0.1", deployed.ports["relay_qad"], timeout=20, insecure=True))
    assert seen.port > 0, seen  # the source port as the container saw it (after the port publisher's NAT)
    assert deployed.metric("relay", "burrow_relay_qad_reports_total") >= 1
    assert deployed.metric("relay", "burrow_relay_qad_handshakes_total") >= 1


def read_logs(deployed: Deployed) -> list[str]:
    code, out = deployed.stack.containers["transit"].exec_run(
        ["sh", "-c", "cat /var/log/burrow/*.jsonl"])
    assert code == 0, out
    return [line for line in out.decode().splitlines() if line.strip()]


def test_event_logs_land_on_the_shared_volume(deployed):
    # Runs after the transfers above (pytest keeps file order): their sessions are in the logs.
    import json

    deadline = time.monotonic() + 30
    while True:
        events = [json.loads(line) for line in read_logs(deployed)]
        seen = {(e["service"], e["event"]) for e in events}
        if {("mailbox", "connection"), ("transit", "session")} <= seen or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert ("mailbox", "connection") in seen and ("transit", "session") in seen, seen
    assert {e["node"] for e in events} == {"smoke"}


def test_mailbox_database_survives_a_new_container(deployed):
    stack = deployed.stack
    old = stack.containers["mailbox"]
    code, out = old.exec_run(["sh", "-c", "ls -i /var/lib/burrow/mailbox.sqlite"])
    assert code == 0, out
    old.stop(timeout=20)
    old.remove()
    new = stack.create("mailbox")
    new.start()
    wait_ready(deployed.url("mailbox_admin", "/readyz"), time.monotonic() + 60, stack)
    code, out2 = new.exec_run(["sh", "-c", "ls -i /var/lib/burrow/mailbox.sqlite"])
    assert code == 0 and out2 == out, (out, out2)


def test_report_profile_over_the_log_volume(deployed):
    build(deployed.client, "docker/Dockerfile.report", REPORT_IMAGE, deployed.base, deployed.pip_url,
          deployed.log)
    stack = deployed.stack
    report = stack.create("report")
    report.start()
    note(deployed.log, "report running")
    result = report.wait(timeout=600)
    output = report.logs().decode(errors="replace")
    note(deployed.log, f"report finished: {result}")
    assert result["StatusCode"] == 0, output
    lister = stack.client.containers.create(
        SERVER_IMAGE, ["sh", "-c", "find /r -type f | sort"],
        volumes={f"{stack.project}_reports": {"bind": "/r", "mode": "ro"}})
    try:
        lister.start()
        assert lister.wait(timeout=60)["StatusCode"] == 0
        files = lister.logs().decode().split()
    finally:
        lister.remove(force=True, v=True)
    assert any(f.endswith(".html") for f in files), (files, output)
