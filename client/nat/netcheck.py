"""netcheck (asyncio): STUN over IPv4 and IPv6 to each relay (two ports to see whether the mapping depends on
the destination), hairpinning, a port mapping via NAT-PMP or UPnP, a captive-portal check via
/generate_204, and relay latency. Every probe has a timeout; the report says what could not be learned.

    report = await netcheck([Relay("https://relay.example:8443", stun_port2=3479)])
    print(report.nat, report.global_v4, report.preferred_relay)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from burrow.wire.stun import StunError, build_binding_request, parse_binding_response

from . import portmap as pm
from .report import Report, classify, preferred_relay

STUN_TRIES = 2  # Binding requests per probe before giving up
HAIRPIN_WAIT = 0.5  # seconds the first socket waits for a packet sent to its own mapped address
TCP_TEST_LIFETIME = 60  # seconds asked for the test port mapping (deleted right away)


@dataclass(frozen=True)
class Relay:
    url: str  # https://host[:port] (DERP base URL); STUN goes to the same host
    stun_port: int = 3478
    stun_port2: int = 0  # a second STUN port on the same relay (burrow-relay --stun-port2); 0 = none
    qad_port: int = 0  # the relay's QUIC address-discovery port (burrow-relay --qad-port); 0 = not asked

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or self.url


def udp_socket(family: int = socket.AF_INET, port: int = 0) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.setblocking(False)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    except OSError:
        sock.close()
        raise
    return sock


async def stun(sock: socket.socket, server: tuple[str, int], timeout: float) -> tuple[str, int, float] | None:
    """Binding request(s) from `sock` to `server`: (mapped ip, mapped port, round trip s), or None."""
    loop = asyncio.get_running_loop()
    for _ in range(STUN_TRIES):
        txid = os.urandom(12)
        t0 = time.monotonic()
        try:
            await loop.sock_sendto(sock, build_binding_request(txid, "burrow-netcheck"), server)
        except OSError:
            return None  # e.g. no route (no IPv6)
        deadline = t0 + timeout / STUN_TRIES
        while (left := deadline - time.monotonic()) > 0:
            try:
                data, _src = await asyncio.wait_for(loop.sock_recvfrom(sock, 2048), left)
                ip, port = parse_binding_response(data, txid)
            except (TimeoutError, OSError):
                break
            except StunError:
                continue  # a stray datagram or an answer to an earlier try
            return ip, port, time.monotonic() - t0
    return None


async def _resolve(host: str, family: int) -> str | None:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, family=family, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    return infos[0][4][0] if infos else None


def _fastest(rtts: dict[str, float], url: str, rtt: float) -> None:
    rtts[url] = min(rtts.get(url, rtt), rtt)


def _hostport(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


async def _udp_v4(relays: list[Relay], r: Report, timeout: float) -> None:
    with udp_socket() as sock:
        local_port = sock.getsockname()[1]
        for relay in relays:
            ip = await _resolve(relay.host, socket.AF_INET)
            if ip is None:
                continue
            first = await stun(sock, (ip, relay.stun_port), timeout)
            if first is None:
                continue
            r.udp = r.ipv4 = True
            _fastest(r.relay_stun_rtt_s, relay.url, first[2])
            if r.global_v4 is None:
                r.global_v4 = _hostport(first[0], first[1])
                r.preserves_port = first[1] == local_port
            if relay.stun_port2 and r.mapping_varies_by_dest_port is None:
                second = await stun(sock, (ip, relay.stun_port2), timeout)
                if second is not None:
                    r.mapping_varies_by_dest_port = second[:2] != first[:2]
                else:
                    r.errors.append(f"no STUN answer on {relay.host}:{relay.stun_port2} (second port)")
        if r.global_v4 is not None:
            r.hairpin = await _hairpin(sock, r.global_v4)


async def _hairpin(sock: socket.socket, mapped: str) -> bool:
    """Send a token from a second socket to our own mapped address; does the first socket get it?"""
    loop = asyncio.get_running_loop()
    host, _, port = mapped.rpartition(":")
    token = b"burrow-hairpin " + os.urandom(8)
    with udp_socket() as other:
        with contextlib.suppress(OSError):
            await loop.sock_sendto(other, token, (host, int(port)))
        deadline = time.monotonic() + HAIRPIN_WAIT
        while (left := deadline - time.monotonic()) > 0:
            try:
                data, _ = await asyncio.wait_for(loop.sock_recvfrom(sock, 2048), left)
            except (TimeoutError, OSError):
                return False
            if data == token:
                return True
    return False


async def _udp_v6(relays: list[Relay], r: Report, timeout: float) -> None:
    try:
        sock = udp_socket(socket.AF_INET6)
    except OSError:
        return
    with sock:
        for relay in relays:
            ip = await _resolve(relay.host, socket.AF_INET6)
            if ip is None:
                continue
            got = await stun(sock, (ip, relay.stun_port), timeout)
            if got is not None:
                r.udp = r.ipv6 = True
                r.global_v6 = _hostport(got[0], got[1])
                _fastest(r.relay_stun_rtt_s, relay.url, got[2])
                return


async def _pcp(r: Report) -> None:
    r.pcp = await pm.pcp_announce()


async def _portmap(r: Report, upnp: bool) -> None:
    with socket.socket() as probe:  # a free TCP port number to map for the test
        probe.bind(("0.0.0.0", 0))
        port = probe.getsockname()[1]
    m = await pm.map_port("tcp", port, TCP_TEST_LIFETIME, upnp=upnp)
    if m is not None:
        r.portmap, r.portmap_external = m.method, _hostport(m.external_ip, m.external_port)
        await pm.unmap(m)


async def https_rtt(relay: Relay, timeout: float, ssl_context) -> float:
    """Seconds from sending GET /derp/probe to the first byte of the answer, on a connection whose TCP and
    TLS handshakes are already done (so it compares with a STUN round trip plus the relay's HTTP work)."""
    u = urlsplit(relay.url)
    ctx = ssl_context
    if ctx is False:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    elif ctx is None:
        ctx = ssl.create_default_context() if u.scheme == "https" else None
    port = u.port or (443 if u.scheme == "https" else 80)
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(u.hostname, port, ssl=ctx)
        try:
            host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
            t0 = time.monotonic()
            writer.write(f"GET /derp/probe HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            status = await reader.readline()
            rtt = time.monotonic() - t0
        finally:
            writer.close()
    if not status.startswith(b"HTTP/1.1 200"):
        raise OSError(f"/derp/probe answered {status[:40]!r}")
    return rtt


async def _http(relays: list[Relay], r: Report, timeout: float, ssl_context) -> None:
    """Each relay's HTTPS round trip, and captive portals: a 204 echoing our challenge means none."""
    import aiohttp

    challenge = "burrow" + os.urandom(8).hex()
    tmo = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(timeout=tmo) as session:
        for relay in relays:
            base = relay.url.rstrip("/")
            try:
                r.relay_https_rtt_s[relay.url] = await https_rtt(relay, timeout, ssl_context)
                async with session.get(base + "/generate_204", ssl=ssl_context, allow_redirects=False,
                                       headers={"X-Tailscale-Challenge": challenge}) as resp:
                    await resp.read()
                    echoed = resp.headers.get("X-Tailscale-Response") == "response " + challenge
                    portal = not (resp.status == 204 and echoed)
                    r.captive_portal = portal if r.captive_portal is None else (r.captive_portal and portal)
            except (aiohttp.ClientError, TimeoutError, OSError, ssl.SSLError) as e:
                r.errors.append(f"{base}: {type(e).__name__}: {e}".rstrip(": "))


async def _qad(relays: list[Relay], r: Report, timeout: float, ca_file: str | None, insecure: bool) -> None:
    """The first relay with a QAD port: the IPv4 address it reports over QUIC (authenticated by its
    certificate), beside the one STUN saw."""
    from .qad import QadFailed, observe  # aioquic is loaded only when asked

    relay = next(x for x in relays if x.qad_port)
    try:
        seen = await observe(relay.host, relay.qad_port, timeout=timeout, ca_file=ca_file, insecure=insecure,
                             family=socket.AF_INET)
    except QadFailed as exc:
        r.errors.append(str(exc))
        return
    r.qad = _hostport(seen.host, seen.port)


async def netcheck(relays: list[Relay], *, timeout: float = 2.0, portmap: bool = True, upnp: bool = True,
                   http: bool = True, ssl_context: ssl.SSLContext | bool | None = None,
                   ca_file: str | None = None) -> Report:
    """Probe everything at once; no step takes much longer than `timeout` seconds (UPnP: its search).
    QUIC address discovery verifies the relay's certificate with `ca_file` (or skips it when `ssl_context`
    is False, the --insecure switch)."""
    from ..transit.aio import local_addresses  # here: transit.aio imports this module (via hints.py)

    r = Report(local_v4=local_addresses(include_loopback=False))
    jobs = [_udp_v4(relays, r, timeout), _udp_v6(relays, r, timeout)]
    if portmap:
        jobs.append(_portmap(r, upnp))
        jobs.append(_pcp(r))
    if http:
        jobs.append(_http(relays, r, timeout, ssl_context))
    if any(x.qad_port for x in relays):
        jobs.append(_qad(relays, r, timeout, ca_file, ssl_context is False))
    await asyncio.gather(*jobs)
    r.preferred_relay = preferred_relay(r)
    r.nat = classify(r)
    return r
