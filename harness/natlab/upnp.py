"""miniupnpd (Debian's miniupnpd-iptables) on the lab's UPnP routers: UPnP IGD on http 5000, NAT-PMP/PCP on
UDP 5351, both on the LAN only; mappings become DNAT rules in the MINIUPNPD chains topology.py created
(legacy iptables, which miniupnpd's libiptc writes to).

The lab's WAN addresses are in a documentation range, which miniupnpd calls reserved; it then forwards
ports only after a STUN check finds no NAT upstream, so `start` also runs isp_stun.py in the internet
namespace and points miniupnpd at it.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import sys
import time
from pathlib import Path

from .rig import Lab, LabError, inside
from .topology import ISP_STUN_PORT, Topology

START_TIMEOUT = 15.0  # seconds for miniupnpd to pass its STUN check and listen
MINIUPNPD = "/usr/sbin/miniupnpd"
READY = ("Port forwarding is now enabled", "Listening for NAT-PMP")  # log lines once it serves

CONFIG = """\
ext_ifname=wan
listening_ip=lan
http_port=5000
enable_natpmp=yes
enable_upnp=yes
secure_mode=yes
system_uptime=yes
min_lifetime=120
max_lifetime=86400
ext_perform_stun=yes
ext_stun_host={stun_host}
ext_stun_port={stun_port}
uuid=3d3cec3a-8cf0-11e0-98ee-00000000{index:04x}
allow 1024-65535 192.168.0.0/16 1024-65535
deny 0-65535 0.0.0.0/0 0-65535
"""


def missing() -> str | None:
    if shutil.which("miniupnpd") is None and not Path(MINIUPNPD).exists():
        return "the upnp scenario needs miniupnpd (Debian package miniupnpd-iptables)"
    return None


def start_isp_stun(lab: Lab, topo: Topology, port: int = ISP_STUN_PORT) -> tuple[str, int]:
    """Run isp_stun.py on the internet's server address and wait until it answers a Binding request."""
    script = Path(__file__).with_name("isp_stun.py")
    log = f"isp-stun-{port}.log"
    proc = lab.spawn(topo.inet, [sys.executable, str(script), topo.server_v4, str(port)], log=log)
    server = (topo.server_v4, port)
    with inside(topo.inet):
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with probe:
        probe.settimeout(0.2)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            probe.sendto(struct.pack("!HHI", 1, 0, 0x2112A442) + os.urandom(12), server)
            try:
                probe.recvfrom(2048)
                return server
            except TimeoutError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise LabError(f"isp_stun.py on {server} did not answer:\n{lab.log(log)[-2000:]}") from None


def start(lab: Lab, topo: Topology) -> None:
    """Start miniupnpd on every UPnP router of the topology and wait until it forwards ports."""
    routers = [r for r in topo.routers.values() if r.nat.upnp]
    if not routers:
        return
    problem = missing()
    if problem:
        raise LabError(problem)
    start_isp_stun(lab, topo)
    for r in routers:
        conf = lab.workdir / f"miniupnpd-{r.name}.conf"
        conf.write_text(CONFIG.format(stun_host=topo.server_v4, stun_port=ISP_STUN_PORT, index=r.index))
        log = f"miniupnpd-{r.name}.log"
        proc = lab.spawn(r.ns, [MINIUPNPD, "-d", "-f", str(conf), "-P", str(lab.workdir / f"miniupnpd-{r.name}.pid")],
                  log=log)
        deadline = time.monotonic() + START_TIMEOUT
        while not all(m in lab.log(log) for m in READY):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise LabError(f"miniupnpd on {r.name} did not get ready:\n{lab.log(log)[-2000:]}")
            time.sleep(0.1)
