"""Burrow's servers in the lab's internet namespace, and a measured file transfer between two lab peers.

`start_servers(lab, topo)` runs burrow-relay (HTTPS DERP with a dev certificate on 8443, STUN on 3478 and a
second STUN port on 3479, QUIC address discovery on 7842), the mailbox (ws 4000) and the transit relay (tcp 4001) on 203.0.113.1 / [::].
`transfer(lab, topo, sender, receiver, size)` sends a random file with `burrow send --dilated` (or classic
transit) and returns a `Transfer`: path taken, time to first byte, time to a direct path, throughput,
and whether the bytes arrived intact. Times are wall clock from starting both peers (noisy; not asserted).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .rig import Lab, LabError, inside
from .topology import Topology

ROOT = Path(__file__).resolve().parents[2]
MODULES = {"relay": "burrow.packet_relay", "mailbox": "burrow.mailbox_server", "transit": "burrow.transit_relay",
           "client": "burrow.client.cli"}
RELAY_HTTPS, STUN_PORT, STUN_PORT2, MAILBOX_PORT, TRANSIT_PORT = 8443, 3478, 3479, 4000, 4001
QAD_PORT = 7842
DEAD_TRANSIT = "tcp:203.0.113.1:1"  # in the internet, nothing listens there: a peer given it has no transit relay
RELAY_NAME = "relay.natlab"  # in every peer's /etc/hosts (Lab.hosts_file) with the relay's IPv4 and IPv6
START_TIMEOUT = 20.0
TRANSFER_TIMEOUT = 120.0
# the line each side prints when its transfer connected: Dilation ("Connected (direct tcp:...)", and the
# older "dilation connected via ..."), classic ("Receiving (relay ...)...", "Sending (direct ...)..."), the
# default send to a burrow receiver ("Receiving (Dilation, relay tcp:...)...", "Moved to a direct path (...)")
CONNECTED = re.compile(r"dilation connected via (\w+) (\S+)|Receiving \((?:Dilation, )?(\w+) ([^)]+)\)"
                       r"|^Connected \((\w+) ([^)]+)\)|^Moved to a direct path \(Dilation, (\w+) ([^)]+)\)")


@dataclass
class Servers:
    host: str
    relay_url: str
    mailbox_url: str
    transit: str
    stun: str

    def client_args(self) -> list[str]:
        return ["--relay-url", self.mailbox_url, "--transit-helper", self.transit, "--stun-server", self.stun]


def python_env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("BURROW_NO_PORTMAP", None)  # tests/conftest.py sets it for clients on the host; the lab maps
    return env


def _wait_tcp(ns: str, host: str, port: int, proc: subprocess.Popen, what: str, lab: Lab, log: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"{what} exited with {proc.returncode}:\n{lab.log(log)[-2000:]}")
        with inside(ns):
            s = socket.socket()
        with s:
            s.settimeout(0.5)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    raise LabError(f"{what} did not listen on {host}:{port}")


def start_servers(lab: Lab, topo: Topology, *, tls: tuple[Path, Path] | None = None, qad: bool = True) -> Servers:
    """`tls`: the relay's (certificate, key) files instead of a generated self-signed one; `qad`: serve
    QUIC address discovery."""
    py, env, ns, host = sys.executable, python_env(), topo.inet, topo.server_v4
    cert = ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])] if tls else \
        ["--dev-tls", "--tls-dir", str(lab.workdir / "tls")]
    relay = lab.spawn(ns, [py, "-m", MODULES["relay"], "--host", "", "--https-port", str(RELAY_HTTPS), *cert,
                           "--stun-port", str(STUN_PORT), "--stun-port2", str(STUN_PORT2),
                           "--qad-port", str(QAD_PORT if qad else 0), "--admin-port", "0",
                           "--stun-rate-per-source", "0"],
                      log="relay.log", env=env)
    mailbox = lab.spawn(ns, [py, "-m", MODULES["mailbox"], "--host", "0.0.0.0", "--port", str(MAILBOX_PORT),
                             "--db", str(lab.workdir / "mailbox.sqlite"), "--admin-port", "0"],
                        log="mailbox.log", env=env)
    transit = lab.spawn(ns, [py, "-m", MODULES["transit"], "--host", "0.0.0.0", "--port", str(TRANSIT_PORT),
                             "--websocket-port", "0", "--admin-port", "0"], log="transit.log", env=env)
    _wait_tcp(ns, host, RELAY_HTTPS, relay, "burrow-relay", lab, "relay.log")
    _wait_tcp(ns, host, MAILBOX_PORT, mailbox, "mailbox", lab, "mailbox.log")
    _wait_tcp(ns, host, TRANSIT_PORT, transit, "transit relay", lab, "transit.log")
    # the relay by name, as users give it: netcheck resolves its IPv4 and IPv6 address separately
    names = {RELAY_NAME: [host, topo.server_v6]}
    for h in topo.hosts.values():
        lab.hosts_file(h.ns, names)
    return Servers(host, f"https://{RELAY_NAME}:{RELAY_HTTPS}", f"ws://{host}:{MAILBOX_PORT}/v1",
                   f"tcp:{host}:{TRANSIT_PORT}", f"{host}:{STUN_PORT}")


@dataclass
class Transfer:
    scenario: str
    kind: str = "dilated"  # "default" (plain `burrow send`) | "dilated" | "classic"
    path: str | None = None  # "direct" | "relay"
    route: str | None = None  # the winning connection's description
    time_to_first_byte_s: float | None = None
    time_to_direct_s: float | None = None
    bytes_ok: bool = False
    throughput_MBps: float | None = None
    output: dict[str, str] = field(default_factory=dict)
    timeline: list[tuple[float, str, str]] = field(default_factory=list)  # (s since start, who, line)

    def row(self) -> dict:
        return {"scenario": self.scenario, "path": self.path, "time_to_first_byte_s": self.time_to_first_byte_s,
                "time_to_direct_s": self.time_to_direct_s, "bytes_ok": self.bytes_ok,
                "throughput_MBps": self.throughput_MBps, "transfer": self.kind, "phases": self.phases()}

    def phases(self) -> dict:
        """Where the time to the first byte went, in seconds since both processes were started:
        code_s       the sender printed the code (Python start-up, imports, mailbox connection, claim)
        key_s        the sender printed "Sending file" (PAKE and verifier done; classic transfers only)
        connected_s  the first side reported its connection (hint exchange, external hints, dials)
        first_byte_s the first byte reached the receiver's disk"""
        def first(pattern, who=None):
            return next((at for at, w, line in self.timeline
                         if (who is None or w == who) and re.search(pattern, line)), None)
        return {"code_s": first(r"^Wormhole code is", "sender"), "key_s": first(r"^Sending (file|directory) ", "sender"),
                "connected_s": first(CONNECTED.pattern), "first_byte_s": self.time_to_first_byte_s}


def _reader(proc: subprocess.Popen, lines: list, t0: float) -> None:
    for raw in proc.stdout:
        lines.append((time.monotonic() - t0, raw.decode(errors="replace").rstrip()))


def transfer(lab: Lab, topo: Topology, servers: Servers, sender: str, receiver: str, size: int, *,
             dilated: bool = True, code: str = "7-natlab-test", extra: list[str] = (),
             default: bool = False) -> Transfer:
    """Send `size` random bytes from peer `sender` to `receiver` through the lab; measure it: `burrow send
    --dilated`, `--classic` (dilated=False), or with `default` plain `burrow send` (Dilated between burrow
    peers, the row kind "default")."""
    src = lab.workdir / f"payload-{size}.bin"
    src.write_bytes(os.urandom(size))
    out = lab.workdir / f"received-{receiver}.bin"
    if out.is_dir():
        shutil.rmtree(out)
    out.unlink(missing_ok=True)
    client = [sys.executable, "-m", MODULES["client"]]
    common = [*servers.client_args(), "--hide-progress", *extra]
    how = [] if default else ["--dilated"] if dilated else ["--classic"]
    send = [*client, "send", *common, "--code", code, *how, str(src)]
    recv = [*client, "receive", *common, "--accept-file", "-o", str(out), code]
    result = Transfer(topo.scenario.name, "default" if default else "dilated" if dilated else "classic")
    t0 = time.monotonic()
    procs, lines = {}, {}
    for who, argv in (("sender", send), ("receiver", recv)):
        procs[who] = subprocess.Popen(["ip", "netns", "exec", topo.hosts[sender if who == "sender" else receiver].ns,
                                       *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=python_env(), cwd=lab.workdir)
        lab.procs.append(procs[who])
        lines[who] = []
        threading.Thread(target=_reader, args=(procs[who], lines[who], t0), daemon=True).start()
        if who == "sender":
            time.sleep(0.3)  # the sender claims the code first
    first_byte = None
    deadline = t0 + TRANSFER_TIMEOUT
    while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
        if first_byte is None and _partial(out):
            first_byte = time.monotonic() - t0
        time.sleep(0.005)
    for p in procs.values():
        if p.poll() is None:
            p.kill()
        p.wait()
    end = time.monotonic() - t0
    result.output = {who: "\n".join(line for _, line in ls) for who, ls in lines.items()}
    result.timeline = sorted((round(at, 3), who, line) for who, ls in lines.items() for at, line in ls)
    for at, line in lines["receiver"] + lines["sender"]:
        m = CONNECTED.search(line)
        if m:
            kind, route = [g for g in m.groups() if g][:2]
            result.path, result.route = ("direct" if kind == "direct" else "relay"), route
            if kind == "direct":
                result.time_to_direct_s = round(at, 3) if result.time_to_direct_s is None else \
                    min(result.time_to_direct_s, round(at, 3))
    got = out / src.name if out.is_dir() else out
    result.bytes_ok = got.is_file() and _sha(got) == _sha(src) and all(p.returncode == 0 for p in procs.values())
    if first_byte is not None:
        result.time_to_first_byte_s = round(first_byte, 3)
        if result.bytes_ok and end > first_byte:
            result.throughput_MBps = round(size / (end - first_byte) / 1e6, 2)
    return result


def _partial(out: Path) -> bool:
    """Has any byte of the file arrived (a dilated receiver writes into a directory, maybe a temp name; a
    receiver of one file into OUT.part or .OUT.*.burrow-part beside it)?"""
    try:
        if out.is_file():
            return out.stat().st_size > 0
        if any(p.stat().st_size > 0 for p in out.parent.glob(f"*{out.name}*part")):
            return True
        return out.is_dir() and any(p.is_file() and p.stat().st_size > 0 for p in out.rglob("*"))
    except OSError:
        return False


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
