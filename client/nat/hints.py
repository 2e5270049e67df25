"""The external `direct-tcp-v1` hint for a TCP listening port behind a NAT (asyncio).

1. A port mapping of the port on the gateway (NAT-PMP, then UPnP IGD): anyone can dial it, including
   magic-wormhole and wormhole-william peers, which just see one more direct hint.
2. Otherwise, when a STUN server is known: a UDP socket bound to the same port number asks it; if the NAT kept
   the port (and, with a second STUN port, gave the same mapping to both destinations), the mapped address
   with our port is advertised. Inbound SYNs reach us through it only once we have sent one from that port
   to the dialler (TCP simultaneous open, ability `tcp-simultaneous-open-v1`), or if the NAT forwards.

Both run at once (`stun_hint` answers in a round trip, a UPnP search takes seconds); callers publish each\nhint as it arrives. `PortMapper.close()` deletes the mapping.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from . import portmap as pm
from .netcheck import stun, udp_socket

log = logging.getLogger(__name__)

SIMOPEN_ABILITY = {"type": "tcp-simultaneous-open-v1"}
MAPPING_LIFETIME = 7200  # seconds asked for the listening port's mapping
DEFAULT_TIMEOUT = 2.0  # seconds for the whole external-address lookup


def parse_stun_server(spec: str, default_port: int = 3478) -> tuple[str, int]:
    """`HOST`, `HOST:PORT` or `[V6]:PORT`."""
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = spec.rpartition(":")
    return (host, int(port)) if sep and port.isdigit() and ":" not in host else (spec, default_port)


def tcp_hint(host: str, port: int, priority: float = 0.0) -> dict:
    return {"type": "direct-tcp-v1", "priority": priority, "hostname": host, "port": port}


async def _stun_preserved(port: int, server: tuple[str, int], server2_port: int,
                          timeout: float) -> tuple[str, int] | None:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(server[0], server[1], family=socket.AF_INET,
                                                              type=socket.SOCK_DGRAM)
        sock = udp_socket(socket.AF_INET, port)
    except OSError as e:
        log.debug("external hint: cannot STUN from port %d: %s", port, e)
        return None
    with sock:
        addr = infos[0][4][:2]
        first = await stun(sock, addr, timeout / 2)
        if first is None or first[1] != port:
            return None
        if server2_port:
            second = await stun(sock, (addr[0], server2_port), timeout / 2)
            if second is not None and second[:2] != first[:2]:
                return None
        return first[0], port


async def stun_hint(port: int, stun_server: tuple[str, int], *, stun_port2: int = 0, local: set[str] = frozenset(),
                    timeout: float = DEFAULT_TIMEOUT) -> dict | None:
    """The STUN-mapped address with our port, when the NAT keeps ports (fast: one round trip or two)."""
    got = await _stun_preserved(port, stun_server, stun_port2, timeout)
    if got is None or got[0] in local:
        return None
    return tcp_hint(*got)


class PortMapper:
    """Maps one TCP port on the gateway for as long as we listen; `close()` deletes the mapping."""

    def __init__(self, port: int, *, upnp: bool = True):
        self.port, self.upnp = port, upnp
        self.mapping: pm.Mapping | None = None
        self._closed = False

    async def hint(self, local: set[str] = frozenset()) -> dict | None:
        m = await pm.map_port("tcp", self.port, MAPPING_LIFETIME, upnp=self.upnp)
        if m is None:
            return None
        if self._closed:  # closed while mapping: undo at once
            await pm.unmap(m)
            return None
        self.mapping = m
        return None if m.external_ip in local else tcp_hint(m.external_ip, m.external_port)

    async def close(self) -> None:
        self._closed = True
        if self.mapping is not None:
            m, self.mapping = self.mapping, None
            await pm.unmap(m)
