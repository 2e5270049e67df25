"""Dilation over a punched UDP path: the `derp-disco-v1` hint, Disco punching and QUIC on the same socket.

in:  our NatOptions (DERP relay URL), the peer's `derp-disco-v1` hint, UDP datagrams that are not Disco
out: our hint, and for each generation at most one QUIC connection to the peer's confirmed direct path whose
     one bidirectional stream carries the same bytes a TCP connection carries (prologue, Noise, records)

Both sides offer `{"type": "derp-disco-v1", "url", "derp-key", "disco-key"}` (keys in hex). A side that got
the peer's hint sends CallMeMaybe through the peer's DERP relay and pings (client/nat/disco.py). Once a
direct path answers, the Leader opens a QUIC connection to it from the Disco socket; the Follower accepts
QUIC Initials only from addresses that are Disco candidates. A stream that starts with the rate-probe magic
(quic_path.py) is counted and answered instead: the Leader measures a UDP path before it leaves the relay.
Packets are told apart by their first bytes: Disco packets start with the Disco magic, everything else on the
socket goes to QUIC.

QUIC's TLS uses a throwaway self-signed certificate and neither side verifies it: Dilation's Noise handshake
inside the stream authenticates both sides with the wormhole's key, as it does on TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging

log = logging.getLogger(__name__)

HINT_TYPE = "derp-disco-v1"
PUNCH_TIMEOUT = 10.0  # seconds we wait for a direct UDP path after CallMeMaybe
MAX_CONNECTIONS = 8  # QUIC connections on one socket (one per generation is normal)
MAX_ENDPOINTS = 16  # endpoints carried in a hint (as in a CallMeMaybe)
PROBE_BYTES = 2 * 1024 * 1024  # bytes one QUIC rate probe sends (a fraction of a second at aioquic's rate)
PROBE_TIMEOUT = 5.0  # seconds for a rate probe, handshake included


def make_hint(url: str, derp_key: bytes, disco_key: bytes, endpoints=()) -> dict:
    return {"type": HINT_TYPE, "url": url, "derp-key": derp_key.hex(), "disco-key": disco_key.hex(),
            "endpoints": [f"{ip}:{port}" for ip, port in endpoints][:MAX_ENDPOINTS]}


def _endpoint(text) -> tuple[str, int] | None:
    if not isinstance(text, str):
        return None
    host, _, port = text.rpartition(":")
    try:
        ipaddress.IPv4Address(host)
        return (host, int(port)) if 0 < int(port) < 65536 else None
    except ValueError:
        return None


def parse_hint(h) -> tuple[str, bytes, bytes, list] | None:
    """(url, derp key, disco key, endpoints) of a well-formed `derp-disco-v1` hint, else None."""
    if not isinstance(h, dict) or h.get("type") != HINT_TYPE or not isinstance(h.get("url"), str):
        return None
    try:
        derp_key, disco_key = bytes.fromhex(h["derp-key"]), bytes.fromhex(h["disco-key"])
    except (KeyError, TypeError, ValueError):
        return None
    if len(derp_key) != 32 or len(disco_key) != 32:
        return None
    eps = h.get("endpoints")
    eps = [e for e in map(_endpoint, eps[:MAX_ENDPOINTS]) if e] if isinstance(eps, list) else []
    return h["url"], derp_key, disco_key, eps


def _import_quic() -> None:
    from ..derp import client  # noqa: F401
    from ..nat import disco  # noqa: F401
    from . import quic_path  # noqa: F401


class DiscoLink:
    """Our DERP client, Disco endpoint and QUIC connections, shared by every generation of one Dilation."""

    def __init__(self, nat):
        self._nat = nat
        self.derp = None
        self.endpoint = None
        self._paths: dict = {}  # addr -> QuicPath
        self._accept = None  # the Follower's current generation: (addr) -> L2Protocol
        self._quic = None  # the quic_path module, imported only when punching is configured

    async def start(self) -> None:
        # aioquic, cryptography and the DERP client take about a second to import on a loaded machine: in a
        # thread, so the event loop goes on with the generation's TCP dials and handshakes meanwhile
        await asyncio.to_thread(_import_quic)
        from ..derp.client import DerpClient
        from ..nat.disco import DiscoEndpoint
        from . import quic_path

        self._quic = quic_path

        nat = self._nat
        self.derp = DerpClient(nat.derp_url, ca_file=nat.derp_ca_file, insecure=nat.derp_insecure)
        try:
            await self.derp.start()
            self.endpoint = DiscoEndpoint(self.derp, stun_server=nat.stun_server)
            await self.endpoint.start()
        except BaseException:
            await self.close()
            raise
        self.endpoint.on_datagram = self._datagram

    def hint(self) -> dict:
        return make_hint(self._nat.derp_url, self.derp.public_key, self.endpoint.public_key,
                         self.endpoint.endpoints())

    async def close(self) -> None:
        for p in list(self._paths.values()):
            p.close()
        if self.endpoint is not None:
            await self.endpoint.close()
        if self.derp is not None:
            await self.derp.close()

    def forget(self, path) -> None:
        if self._paths.get(path.addr) is path:
            del self._paths[path.addr]

    # ---- punching
    async def punch(self, hint: tuple[str, bytes, bytes, list], timeout: float = PUNCH_TIMEOUT):
        """CallMeMaybe to the peer, ping the endpoints of its hint, and wait for a direct path: its (ip, port),
        or None. The hint's endpoints matter when our CallMeMaybe reaches a peer that has not read our hint
        yet (it drops Disco from keys it does not know): our pings open our NAT for its answer."""
        _url, derp_key, disco_key, endpoints = hint
        peer = self.endpoint.add_peer(derp_key, disco_key, endpoints)
        path = self.endpoint.path(peer)
        if path.kind != "direct":
            await self.endpoint.call(peer)
            try:
                path = await self.endpoint.wait_direct(peer, timeout)
            except TimeoutError:
                return None
        return path.endpoint

    # ---- QUIC
    def connect(self, addr, make_protocol):
        """Leader: a QuicPath to `addr` (None at the limit); `make_protocol(addr)` once its stream is open."""
        if len(self._paths) >= MAX_CONNECTIONS:
            return None
        old = self._paths.get(addr)
        if old is not None:
            old.close()
        path = self._quic.QuicPath(self, self._quic.client_connection(), addr, make_protocol)
        self._paths[addr] = path
        path.quic.connect(addr, now=asyncio.get_running_loop().time())
        path.transmit()
        return path

    async def measure(self, addr, nbytes: int = PROBE_BYTES, timeout: float = PROBE_TIMEOUT) -> float | None:
        """Leader: the bytes per second one QUIC connection to `addr` moves towards the peer (`nbytes` on one
        stream, timed to the peer's count); None when it does not answer within `timeout`."""
        probe = self._quic.ProbeSender(nbytes)
        path = self.connect(addr, lambda _addr: probe)
        if path is None:
            return None
        try:
            async with asyncio.timeout(timeout):
                return await probe.result
        except TimeoutError:
            return None
        finally:
            path.close()

    def accept(self, make_protocol) -> None:
        """Follower: QUIC connections from Disco candidates go to `make_protocol` (None: refuse them)."""
        self._accept = make_protocol

    def _l2_protocol(self, addr):
        """The Follower's current generation takes a Dilation stream (a rate probe needs none)."""
        return self._accept(addr) if self._accept is not None else None

    def _datagram(self, data: bytes, addr) -> None:
        path = self._paths.get(addr)
        if path is not None and not path.closed:
            if not path.is_other_connection(data):
                path.datagram(data)
                return
            path.close()
        stats = self.endpoint.stats
        if len(self._paths) >= MAX_CONNECTIONS or not self.endpoint.knows(addr):
            stats["quic_refused"] += 1
            return
        quic = self._quic.server_connection(data)
        if quic is None:  # not a QUIC Initial: nothing to accept
            stats["quic_refused"] += 1
            return
        path = self._quic.QuicPath(self, quic, addr, self._l2_protocol)
        self._paths[addr] = path
        stats["quic_accepted"] += 1
        path.datagram(data)


def describe(addr) -> str:
    return f"direct quic:{addr[0]}:{addr[1]}"


async def close_quietly(link: DiscoLink | None) -> None:
    if link is not None:
        with contextlib.suppress(Exception):
            await link.close()
