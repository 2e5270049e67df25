"""`make run` (scripts/run_suite.py) in a private network namespace: loopback only, banner after /readyz,
a service that cannot start stops the rest with exit status 1."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

# Runs inside `unshare -n`: loopback up, then the given shell snippet (run_suite is started by it).
NETNS = "ip link set lo up && {body}"


def in_private_net(body: str, var: Path) -> subprocess.CompletedProcess:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("this test needs root and unshare (util-linux): it runs make run in its own network namespace")
    env = dict(os.environ, BURROW_RUN_VAR=str(var))
    return subprocess.run(["unshare", "-n", "sh", "-c", NETNS.format(body=body)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=150)


def test_services_listen_on_loopback_only_and_the_banner_follows_readiness(tmp_path):
    ready = f"{sys.executable} -c \"import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())\""
    script = (f"{sys.executable} scripts/run_suite.py > {tmp_path}/out 2> {tmp_path}/err & pid=$!; "
              f"for i in $(seq 150); do grep -q 'Burrow is running' {tmp_path}/out 2>/dev/null && break; sleep 0.2; done; "
              f"ss -ltnH > {tmp_path}/tcp; ss -lunH > {tmp_path}/udp; "
              f"for p in 9400 9401 9402 9403; do {ready} http://127.0.0.1:$p/readyz >> {tmp_path}/ready; done; "
              f"kill -INT $pid; wait $pid")
    done = in_private_net(script, tmp_path / "var")
    out = (tmp_path / "out").read_text()
    assert "Burrow is running" in out, (out, (tmp_path / "err").read_text()[-2000:], done.stderr)
    assert (tmp_path / "ready").read_text().count("ready") == 4  # every service was ready at the banner
    listening = [line.split()[3] for line in (tmp_path / "tcp").read_text().splitlines()]
    listening += [line.split()[3] for line in (tmp_path / "udp").read_text().splitlines()]
    ports = {addr.rsplit(":", 1)[1]: addr.rsplit(":", 1)[0] for addr in listening}
    for port in ("4000", "4001", "4002", "4003", "4004", "8443", "3478"):
        assert ports.get(port) == "127.0.0.1", (port, listening)
    assert "stopped" in out


def test_a_service_that_cannot_start_stops_the_rest_with_status_1(tmp_path):
    # something else holds the transit relay's port
    script = (f"{sys.executable} -c \"import socket,time; s=socket.socket(); s.bind(('127.0.0.1', 4001)); "
              f"s.listen(); time.sleep(60)\" & sleep 0.5; "
              f"{sys.executable} scripts/run_suite.py; echo exit=$?")
    done = in_private_net(script, tmp_path / "var")
    assert "exit=1" in done.stdout, done.stdout + done.stderr
    assert "a service failed to start (exited: transit)" in done.stderr
    assert "Burrow is running" not in done.stdout
