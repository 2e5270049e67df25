"""Ask a relay's QUIC address-discovery port (iroh's QAD) which address our UDP packets arrive from.

The STUN question asked over QUIC: one connection with ALPN `/iroh-qad/0`; the relay answers with an
OBSERVED_ADDRESS frame right after the handshake. Unlike STUN, the answer is authenticated by the relay's
TLS certificate.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration

from burrow.wire.qad import ALPN, Observed, Role
from burrow.wire.qad_quic import QadConnection


class QadFailed(Exception):
    """No report: the port did not answer, the handshake failed, or the relay sent no report in time."""


async def observe(host: str, port: int, *, timeout: float = 5.0, ca_file: str | None = None,
                  insecure: bool = False, server_name: str | None = None,
                  local_port: int = 0, family: int = 0) -> Observed:
    """The relay's report of our address, from a UDP socket bound to `local_port` (0: any), over IPv4 or
    IPv6 as `family` says (0: the first address the name resolves to)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, family=family, type=socket.SOCK_DGRAM)
    except socket.gaierror as exc:
        raise QadFailed(f"cannot resolve {host}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    config = QuicConfiguration(is_client=True, alpn_protocols=[ALPN], server_name=server_name or host,
                               idle_timeout=timeout + 5)
    if insecure:
        config.verify_mode = ssl.CERT_NONE
    elif ca_file:
        config.load_verify_locations(ca_file)
    report: asyncio.Future[Observed] = loop.create_future()

    def got(observed: Observed) -> None:
        if not report.done():
            report.set_result(observed)

    quic = QadConnection(role=Role.RECEIVES, configuration=config, on_observed=got)
    local = ("::" if family == socket.AF_INET6 else "0.0.0.0", local_port)
    transport, protocol = await loop.create_datagram_endpoint(lambda: QuicConnectionProtocol(quic),
                                                              local_addr=local, family=family)
    try:
        protocol.connect(address)
        async with asyncio.timeout(timeout):
            await protocol.wait_connected()
            if quic.peer_role is None or not quic.peer_role.reports_to(Role.RECEIVES):
                raise QadFailed(f"{host}:{port} does not offer address reports (its QUIC endpoint is not QAD)")
            return await report
    except TimeoutError:
        raise QadFailed(f"no address report from {host}:{port} within {timeout:g} s") from None
    except ConnectionError as exc:  # aioquic: the handshake failed (e.g. certificate verification)
        raise QadFailed(f"QUIC handshake with {host}:{port} failed: {exc}") from None
    finally:
        protocol.close()
        await asyncio.sleep(0)  # let the CONNECTION_CLOSE leave before the socket closes
        transport.close()
