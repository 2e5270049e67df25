"""A real iroh endpoint (PyPI `iroh`) in a NAT lab peer namespace, homed on the lab's burrow-relay.

    python iroh_peer.py accept RELAY_URL QAD_PORT NBYTES
        prints {"id", "addrs"} once online, then answers one connection: reads what the dialler sends,
        sends NBYTES of its own and the SHA-256 of what it read, and exits when the dialler closes
    python iroh_peer.py dial RELAY_URL QAD_PORT NBYTES PEER_ID DIRECT_WAIT
        dials PEER_ID through the relay, waits up to DIRECT_WAIT s for a direct (IP) path to be
        selected, then exchanges NBYTES each way and prints the outcome, the connection's paths and
        seconds: connect_s (the dial), direct_s (from the dial to a direct path selected, null if none
        within DIRECT_WAIT), transfer_s (sending NBYTES, then receiving the NBYTES answer), and the
        answer's receive rate recv_MBps (the acceptor prints its own for our bytes when it exits)

QAD_PORT 0 leaves QUIC address discovery off in the relay map. `addrs` are the endpoint's own direct
addresses (its interfaces, and with QAD the public address the relay saw). Run it only inside the lab:
the endpoint's port mapper probes the default gateway. harness/natlab/iroh_pair.py runs it with a copy of the
iroh package that trusts the lab's root first on PYTHONPATH (harness/natlab/iroh_trust.py). It runs as a script,
so its own directory comes first on sys.path: no module beside it may be named `iroh`.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import os
import sys
import time

import iroh

ALPN = b"burrow/natlab-iroh/1"
ONLINE_WAIT = 20.0  # s for the home relay
ADDR_WAIT = 10.0    # s for a public address among our own (QAD answers after the relay connection)
MAX_READ = 64 * 1024 * 1024
CHUNK = 1 << 20     # bytes asked for per read


def _options(relay_url: str, qad_port: int, protocols=None) -> iroh.EndpointOptions:
    relays = iroh.RelayMap.empty()
    relays.insert(iroh.RelayConfig(url=relay_url, quic_port=qad_port or None))
    kwargs = dict(preset=iroh.preset_minimal(), bind_addr="0.0.0.0:0", relay_mode=iroh.RelayMode.custom(relays),
                  alpns=[ALPN])
    if protocols:
        kwargs["protocols"] = protocols
    return iroh.EndpointOptions(**kwargs)


def _public(addr: str) -> bool:
    return ipaddress.ip_address(addr.rsplit(":", 1)[0].strip("[]")).is_global or addr.startswith("203.0.113.")


async def _online(ep) -> list[str]:
    """Home relay up; then our direct addresses once a public one shows (or ADDR_WAIT passed)."""
    await asyncio.wait_for(ep.online(), ONLINE_WAIT)
    deadline = time.monotonic() + ADDR_WAIT
    while not any(_public(a) for a in ep.addr().direct_addresses()) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return sorted(ep.addr().direct_addresses())


def _paths(conn) -> list[dict]:
    return [{"remote": p.remote_addr, "ip": p.is_ip, "relay": p.is_relay, "selected": p.is_selected,
             "tx_bytes": p.stats.udp_tx_bytes, "rx_bytes": p.stats.udp_rx_bytes} for p in conn.paths()]


async def _read_all(recv) -> tuple[bytes, float | None]:
    """The stream to its end (at most MAX_READ bytes), and its receive rate in MB/s: the bytes after the
    first read over the seconds from the first read to the last. The sender's binding hands its whole
    payload to iroh before the first byte leaves, so this rate is the path's, not the binding's."""
    chunks, size, first, last, first_len = [], 0, 0.0, 0.0, 0
    while size <= MAX_READ:
        chunk = await recv.read(CHUNK)
        if not chunk:
            break
        last = time.monotonic()
        if not chunks:
            first, first_len = last, len(chunk)
        chunks.append(chunk)
        size += len(chunk)
    rate = round((size - first_len) / (last - first) / 1e6, 2) if last > first else None
    return b"".join(chunks), rate


class Answer(iroh.ProtocolHandler):
    def __init__(self, reply: bytes, done: asyncio.Future):
        self.reply, self.done = reply, done

    async def accept(self, conn):
        rate = None
        try:
            bi = await conn.accept_bi()
            data, rate = await _read_all(bi.recv())
            await bi.send().write_all(hashlib.sha256(data).digest() + self.reply)
            await bi.send().finish()
            await conn.closed()
        finally:
            if not self.done.done():
                self.done.set_result(rate)

    async def shutdown(self):
        return None


class Creator(iroh.ProtocolCreator):
    def __init__(self, handler):
        self.handler = handler

    def create(self, endpoint):
        return self.handler


async def accept(relay_url: str, qad_port: int, nbytes: int) -> dict:
    reply = os.urandom(nbytes)
    done: asyncio.Future = asyncio.get_running_loop().create_future()
    ep = await iroh.Endpoint.bind(_options(relay_url, qad_port, {ALPN: Creator(Answer(reply, done))}))
    try:
        addrs = await _online(ep)
        print(json.dumps({"id": str(ep.id()), "addrs": addrs, "reply_sha256": hashlib.sha256(reply).hexdigest(),
                          "iroh": iroh.__file__}), flush=True)
        rate = await asyncio.wait_for(done, 300)
        return {"answered": True, "recv_MBps": rate}
    finally:
        await ep.close()


async def dial(relay_url: str, qad_port: int, nbytes: int, peer: str, direct_wait: float) -> dict:
    data = os.urandom(nbytes)
    ep = await iroh.Endpoint.bind(_options(relay_url, qad_port))
    try:
        result: dict = {"addrs": await _online(ep), "iroh": iroh.__file__}
        started = time.monotonic()
        conn = await asyncio.wait_for(ep.connect(iroh.EndpointAddr(iroh.EndpointId.from_string(peer), relay_url, []),
                                                 ALPN), 20)
        result["connect_s"] = round(time.monotonic() - started, 3)
        result["direct_s"] = None
        while time.monotonic() - started < direct_wait:
            if any(p["selected"] and p["ip"] for p in _paths(conn)):
                result["direct_s"] = round(time.monotonic() - started, 3)
                break
            await asyncio.sleep(0.05)
        result["paths_before"] = _paths(conn)
        sent = time.monotonic()
        bi = await conn.open_bi()
        await bi.send().write_all(data)
        await bi.send().finish()
        back, rate = await asyncio.wait_for(_read_all(bi.recv()), 120)
        result.update(transfer_s=round(time.monotonic() - sent, 3), recv_MBps=rate, paths=_paths(conn),
                      their_digest_ok=back[:32] == hashlib.sha256(data).digest(),
                      got_sha256=hashlib.sha256(back[32:]).hexdigest(), got_bytes=len(back) - 32)
        conn.close(0, b"done")
        return result
    finally:
        await ep.close()


async def _main(argv: list[str]) -> int:
    iroh.iroh_ffi.uniffi_set_event_loop(asyncio.get_running_loop())
    if os.environ.get("IROH_PEER_LOG"):  # iroh's own log on stdout (DEBUG, TRACE, ...), when debugging
        iroh.set_log_level(getattr(iroh.LogLevel, os.environ["IROH_PEER_LOG"]))
    mode, relay_url, qad_port, nbytes = argv[0], argv[1], int(argv[2]), int(argv[3])
    if mode == "accept":
        result = await accept(relay_url, qad_port, nbytes)
    else:
        result = await dial(relay_url, qad_port, nbytes, argv[4], float(argv[5]))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main(sys.argv[1:])))
