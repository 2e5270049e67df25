"""Real iroh endpoints (PyPI iroh) in the NAT lab, homed on the lab's burrow-relay: peer `b` accepts, peer
`a` dials it through the relay, and both exchange a payload; what each learnt and which path carried it.

The relay runs with a certificate signed by a root that only a copy of the iroh package trusts
(iroh_trust.py); the endpoints (iroh_peer.py, one process each in its peer's namespace) import that copy.
Used by tests/natlab/test_iroh_qad.py and `bench/nat.py --transfer iroh`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import services
from .iroh_trust import patched_iroh
from .rig import Lab, LabError
from .topology import build

PEER = Path(__file__).with_name("iroh_peer.py")
MAX_BYTES = 64 * 1024 * 1024 - 32  # iroh_peer.py reads at most 64 MiB, the answer carries a 32-byte digest
PEER_TIMEOUT = 300.0


@dataclass
class IrohPair:
    scenario: str
    qad: bool
    nbytes: int
    a: dict  # the dialler's report (iroh_peer.py dial)
    b: dict  # the acceptor's first line (id, addrs, reply_sha256, iroh) and its last (recv_MBps)
    public: dict[str, str]  # peer name -> its NAT's public IPv4 address
    trust: Path  # the directory whose iroh package the endpoints imported

    @property
    def selected(self) -> dict:
        chosen = [p for p in self.a["paths"] if p["selected"]]
        if len(chosen) != 1:
            raise AssertionError(f"not one selected path: {self.a['paths']}")
        return chosen[0]

    @property
    def bytes_ok(self) -> bool:
        return (self.a["their_digest_ok"] and self.a["got_sha256"] == self.b["reply_sha256"]
                and self.a["got_bytes"] == self.nbytes)

    def row(self) -> dict:
        """bench/nat.py's row: path, time to the direct path (from the dial), and the receive rates of both
        directions (iroh_peer.py's recv_MBps); throughput_MBps is the slower of the two."""
        path = self.selected
        rates = (self.b.get("recv_MBps"), self.a.get("recv_MBps"))
        return {"scenario": self.scenario, "transfer": "iroh", "qad": self.qad,
                "path": "direct" if path["ip"] else "relay", "route": path["remote"],
                "time_to_direct_s": self.a["direct_s"], "connect_s": self.a["connect_s"], "bytes_ok": self.bytes_ok,
                "a_to_b_MBps": rates[0], "b_to_a_MBps": rates[1],
                "throughput_MBps": min(rates) if self.bytes_ok and None not in rates else None}


def _json_line(text: str) -> dict | None:
    lines = [x for x in text.splitlines() if x.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def iroh_pair(lab: Lab, scenario: str, *, qad: bool, nbytes: int, direct_wait: float) -> IrohPair:
    """Build `scenario`, start the servers (QAD on or off), and run one exchange of `nbytes` each way."""
    if nbytes > MAX_BYTES:
        raise ValueError(f"at most {MAX_BYTES} bytes each way")
    topo = build(lab, scenario)
    trust = patched_iroh(lab.workdir)
    cert = trust.issue(lab.workdir, [services.RELAY_NAME])
    servers = services.start_servers(lab, topo, tls=cert, qad=qad)
    env = {**services.python_env(), "PYTHONPATH": f"{trust.pythonpath}:{services.ROOT}"}
    qad_port = str(services.QAD_PORT)  # in the relay map either way: with QAD off nothing answers there
    accept = subprocess.Popen(["ip", "netns", "exec", topo.hosts["b"].ns, sys.executable, str(PEER), "accept",
                               servers.relay_url, qad_port, str(nbytes)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lab.procs.append(accept)
    first = accept.stdout.readline()  # {"id", "addrs", ...} once online
    b = _json_line(first)
    if b is None:
        accept.kill()
        raise LabError(f"the accepting iroh endpoint did not come online: {first!r} {accept.stderr.read()[-3000:]}")
    dial = subprocess.run(["ip", "netns", "exec", topo.hosts["a"].ns, sys.executable, str(PEER), "dial",
                           servers.relay_url, qad_port, str(nbytes), b["id"], str(direct_wait)],
                          capture_output=True, text=True, env=env, timeout=PEER_TIMEOUT)
    a = _json_line(dial.stdout)
    if dial.returncode != 0 or a is None:
        raise LabError(f"the dialling iroh endpoint failed: {dial.stderr[-3000:]}")
    out, err = accept.communicate(timeout=30)
    last = _json_line(out)
    if not last or not last.get("answered"):
        raise LabError(f"the accepting iroh endpoint did not answer: {err[-3000:]}")
    b.update(last)
    wan = {r.ns: r.wan_v4 for r in topo.routers.values()}
    return IrohPair(scenario, qad, nbytes, a, b, {name: wan.get(h.router, h.v4) for name, h in topo.hosts.items()},
                    trust.pythonpath)
