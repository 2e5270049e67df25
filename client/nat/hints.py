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
import errno
import ipaddress
import logging
import socket

from . import SIMOPEN_ABILITY  # noqa: F401 - re-exported
from . import portmap as pm
from .netcheck import stun, udp_socket
from .options import NatOptions, parse_stun_server  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

MAPPING_LIFETIME = 7200  # seconds asked for the listening port's mapping
DEFAULT_TIMEOUT = 2.0  # seconds for the whole external-address lookup


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
        # False until a mapping request may have reached the gateway: while only searching (NAT-PMP's address
        # request, the SSDP search), cancelling hint() leaves nothing behind
        self.committed = False

    def _commit(self) -> None:
        self.committed = True

    async def hint(self, local: set[str] = frozenset()) -> dict | None:
        m = await pm.map_port("tcp", self.port, MAPPING_LIFETIME, upnp=self.upnp, committing=self._commit)
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


SIMOPEN_WINDOW = 5.0  # seconds we keep re-dialling a peer's hint from our listening port
SIMOPEN_RETRY = 0.5  # seconds between those dials (a NAT that answers a early SYN with RST)
# no route to the peer's address (our routing table, or a router's ICMP unreachable): re-dialling cannot help,
# unlike a RST from a NAT that the peer's SYN has not opened yet
UNREACHABLE = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH})


def reusable_socket(family: int, port: int = 0) -> socket.socket:
    """A TCP socket bound to `port` with SO_REUSEADDR + SO_REUSEPORT, so a listener and any number of
    outbound connections can share the port (each connection still has its own 4-tuple)."""
    # IPPROTO_TCP, not 0: asyncio turns Nagle off only on sockets whose proto says TCP (common/listen.py)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def listening_sockets(backlog: int = 64) -> list[socket.socket]:
    """IPv4 and (when the host has it) IPv6 listening sockets on one port number."""
    v4 = reusable_socket(socket.AF_INET)
    v4.listen(backlog)
    socks = [v4]
    try:
        v6 = reusable_socket(socket.AF_INET6, v4.getsockname()[1])
        v6.listen(backlog)
        socks.append(v6)
    except OSError:  # no IPv6 here, or the port is taken on IPv6: IPv4 only
        pass
    return socks


def global_v6_addresses() -> list[str]:
    """Global-scope IPv6 addresses of this host (from /proc/net/if_inet6), deprecated ones excluded."""
    out = []
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and fields[3] == "00" and not int(fields[4], 16) & 0x20:  # scope global
                    raw = fields[0]
                    out.append(str(ipaddress.IPv6Address(int(raw, 16))))
    except OSError:
        pass
    return out


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def dial_from(port: int, host: str, dest_port: int, timeout: float) -> socket.socket:
    """Connect from our listening `port` to host:dest_port, re-dialling refused or reset attempts for up
    to SIMOPEN_WINDOW: the peer does the same towards us, and the SYNs meet in the NATs. An unreachable
    network or host fails at once, and so does a loopback address (no NAT on the way: a refusal is final; a
    peer's 127.0.0.1 hint is otherwise re-dialled for the whole window, holding up the relay's head start)."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    final = _is_loopback(host)
    deadline = loop.time() + max(timeout, SIMOPEN_WINDOW)
    while True:
        sock = reusable_socket(family, port)
        try:
            async with asyncio.timeout(max(0.1, min(timeout, deadline - loop.time()))):
                await loop.sock_connect(sock, (host, dest_port))
            return sock
        except (OSError, TimeoutError) as e:
            sock.close()
            if final or loop.time() + SIMOPEN_RETRY >= deadline or getattr(e, "errno", None) in UNREACHABLE:
                raise
        await asyncio.sleep(SIMOPEN_RETRY)
