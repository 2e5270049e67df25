"""Port mappings on the local gateway (asyncio): NAT-PMP first (one UDP round trip), then UPnP IGD.

NAT-PMP goes to the default gateway from /proc/net/route with natpmp.py's codec. UPnP: our own SSDP search
for an InternetGatewayDevice (ssdp.py), then, only when a gateway answered, async-upnp-client for its
description and WANIPConnection (or WANPPPConnection) GetExternalIPAddress and AddPortMapping for our LAN
address. That library and aiohttp cost about a quarter of a CPU-second to import, which a network without
a UPnP gateway (the common case) never pays. Every step has a timeout; failures return None and say why in
the log. `committing`, when given, is called just before the first request that could create a mapping:
until then a lookup can be cancelled without leaving anything on the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from dataclasses import dataclass

from . import natpmp, pcp, ssdp

log = logging.getLogger(__name__)

UPNP_SEARCH_TIMEOUT = 2  # seconds of SSDP search (the MX value asked of devices)
UPNP_SEARCH_RESEND = 0.5  # seconds before the M-SEARCH is sent once more (UDP may drop it)
UPNP_MORE_ANSWERS = 0.1  # seconds to wait for more gateways after the first answered
UPNP_REQUEST_TIMEOUT = 3  # seconds per SOAP request
IGD = "urn:schemas-upnp-org:device:InternetGatewayDevice:1"
WAN_SERVICES = ("urn:schemas-upnp-org:service:WANIPConnection:2", "urn:schemas-upnp-org:service:WANIPConnection:1",
                "urn:schemas-upnp-org:service:WANPPPConnection:1")
DESCRIPTION = "burrow"


@dataclass(frozen=True)
class Mapping:
    method: str  # "nat-pmp" | "upnp"
    protocol: str  # "tcp" | "udp"
    internal_port: int
    external_ip: str
    external_port: int
    lifetime: int  # seconds
    gateway: str  # NAT-PMP gateway address, or the IGD's control URL


def default_gateway(route_file: str = "/proc/net/route") -> str | None:
    """The IPv4 default gateway of this network namespace, or None."""
    try:
        with open(route_file) as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[1] == "00000000" and int(fields[3], 16) & 2:  # RTF_GATEWAY
            return socket.inet_ntoa(struct.pack("<I", int(fields[2], 16)))
    return None


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self):
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=16)

    def datagram_received(self, data, addr) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(data)

    async def before(self, deadline: float) -> bytes | None:
        """The next datagram, or None once the loop's clock passes `deadline`."""
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            return None
        try:
            return await asyncio.wait_for(self.queue.get(), left)
        except TimeoutError:
            return None


async def _natpmp_ask(gateway: str, request: bytes, parse, error: type[Exception] = natpmp.NatPmpError):
    """Send `request`, retransmitting per natpmp.RETRY_DELAYS; the first answer `parse` accepts (an `error`
    with a result code is the gateway's refusal and raised; one without is a stray datagram)."""
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(_Datagrams, remote_addr=(gateway, natpmp.PORT))
    try:
        for wait in natpmp.RETRY_DELAYS:
            transport.sendto(request)
            deadline = loop.time() + wait
            while (data := await proto.before(deadline)) is not None:
                try:
                    return parse(data)
                except error as e:
                    if e.result is not None:
                        raise
        return None
    finally:
        transport.close()


async def natpmp_map(protocol: str, internal_port: int, lifetime: int = 7200,
                     gateway: str | None = None, committing=None) -> Mapping | None:
    gateway = gateway or default_gateway()
    if gateway is None:
        return None
    try:
        addr = await _natpmp_ask(gateway, natpmp.external_address_request(), natpmp.parse_external_address)
        if addr is None:
            return None
        if committing is not None:
            committing()
        m = await _natpmp_ask(gateway, natpmp.map_request(protocol, internal_port, internal_port, lifetime),
                              lambda d: natpmp.parse_map(d, protocol))
    except (OSError, natpmp.NatPmpError) as e:
        log.info("NAT-PMP at %s: %s", gateway, e)
        return None
    if m is None or not m.lifetime:
        return None
    return Mapping("nat-pmp", protocol, internal_port, addr.ip, m.external_port, m.lifetime, gateway)


async def natpmp_unmap(mapping: Mapping) -> None:
    with contextlib.suppress(OSError, natpmp.NatPmpError):
        await _natpmp_ask(mapping.gateway, natpmp.map_request(mapping.protocol, mapping.internal_port, 0, 0),
                          lambda d: natpmp.parse_map(d, mapping.protocol))


async def pcp_announce(gateway: str | None = None) -> bool | None:
    """Does the gateway speak PCP (RFC 6887)? One ANNOUNCE request: True on a PCP answer, False when it stays
    silent, refuses, or answers as a NAT-PMP-only gateway does; None without a default gateway."""
    gateway = gateway or default_gateway()
    if gateway is None:
        return None

    def parse(data: bytes) -> bool:
        if data[:1] == b"\0":  # NAT-PMP version 0: "unsupported version"
            return False
        pcp.parse_answer(data, pcp.OP_ANNOUNCE)
        return True

    try:
        return bool(await _natpmp_ask(gateway, pcp.announce_request(_local_address_towards(gateway)), parse,
                                      pcp.PcpError))
    except (OSError, pcp.PcpError) as e:
        log.info("PCP at %s: %s", gateway, e)
        return False


def _local_address_towards(host: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))  # no packet is sent: this only asks the routing table
        return s.getsockname()[0]


async def ssdp_search(target: str = IGD, timeout: float | None = None,
                      address: tuple[str, int] | None = None) -> list[str]:
    """The LOCATIONs of the devices of type `target` that answer an M-SEARCH to `address` (ssdp.ADDRESS, the
    SSDP multicast group), in the order they answered: returns UPNP_MORE_ANSWERS after the first answer, or
    empty after `timeout` (UPNP_SEARCH_TIMEOUT)."""
    timeout = UPNP_SEARCH_TIMEOUT if timeout is None else timeout
    address = address or ssdp.ADDRESS
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(_Datagrams, local_addr=("0.0.0.0", 0))
    request = ssdp.search_request(target, max(1, min(5, round(timeout))), address)
    locations: list[str] = []
    resend = loop.call_later(UPNP_SEARCH_RESEND, transport.sendto, request, address)
    try:
        transport.sendto(request, address)
        deadline = loop.time() + timeout
        while (data := await proto.before(deadline)) is not None:
            location = ssdp.parse_answer(data, target)
            if location is not None and location not in locations:
                locations.append(location)
                deadline = min(deadline, loop.time() + UPNP_MORE_ANSWERS)
    finally:
        resend.cancel()
        transport.close()
    return locations


async def _find_wan_service(committing=None):
    """The first IGD's WAN connection service (async-upnp-client UpnpService), or None."""
    locations = await ssdp_search()
    if not locations:
        return None
    if committing is not None:
        committing()
    from async_upnp_client.aiohttp import AiohttpRequester
    from async_upnp_client.client_factory import UpnpFactory

    factory = UpnpFactory(AiohttpRequester(UPNP_REQUEST_TIMEOUT), non_strict=True)
    for location in locations:
        try:
            device = await factory.async_create_device(location)
        except Exception as e:  # noqa: BLE001 - any broken device description: try the next one
            log.info("UPnP device at %s: %s", location, e)
            continue
        for stype in WAN_SERVICES:
            service = device.find_service(stype)
            if service is not None:
                return service
    return None


async def upnp_map(protocol: str, internal_port: int, lifetime: int = 7200, committing=None) -> Mapping | None:
    try:
        service = await _find_wan_service(committing)
        if service is None:
            return None
        from urllib.parse import urlsplit

        host = urlsplit(service.control_url).hostname or ""
        external = (await service.action("GetExternalIPAddress").async_call())["NewExternalIPAddress"]
        await service.action("AddPortMapping").async_call(
            NewRemoteHost="", NewExternalPort=internal_port, NewProtocol=protocol.upper(),
            NewInternalPort=internal_port, NewInternalClient=_local_address_towards(host), NewEnabled=True,
            NewPortMappingDescription=DESCRIPTION, NewLeaseDuration=lifetime)
    except Exception as e:  # noqa: BLE001 - UPnP failures of every kind mean "no mapping"
        log.info("UPnP port mapping: %s", e)
        return None
    return Mapping("upnp", protocol, internal_port, external, internal_port, lifetime, service.control_url)


async def upnp_unmap(mapping: Mapping) -> None:
    with contextlib.suppress(Exception):
        service = await _find_wan_service()
        if service is not None:
            await service.action("DeletePortMapping").async_call(
                NewRemoteHost="", NewExternalPort=mapping.external_port, NewProtocol=mapping.protocol.upper())


async def map_port(protocol: str, internal_port: int, lifetime: int = 7200, *, upnp: bool = True,
                   committing=None) -> Mapping | None:
    """NAT-PMP, then UPnP IGD; None when the gateway offers neither."""
    m = await natpmp_map(protocol, internal_port, lifetime, committing=committing)
    if m is None and upnp:
        m = await upnp_map(protocol, internal_port, lifetime, committing)
    return m


async def unmap(mapping: Mapping) -> None:
    await (natpmp_unmap(mapping) if mapping.method == "nat-pmp" else upnp_unmap(mapping))
