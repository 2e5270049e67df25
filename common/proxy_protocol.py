"""`--proxy-protocol` for every server: the client's address from the header a TCP-mode balancer sends.

With the option on, every connection on a client port must start with a PROXY protocol header (v2 as
HAProxy's `send-proxy-v2` writes it, or v1; see wire/proxy_protocol.py). The connection's own code then
sees the client's address wherever it asks the transport for `peername`: per-IP limits, logs and
events count the client, not the balancer. A connection that starts with anything else (a client that
reached the port directly), sends a malformed header, or sends nothing within the timeout is refused
with a short reason and counted in `burrow_<service>_proxy_protocol_refusals_total{reason}`; a
connection closed before its first byte (a balancer's TCP health check) is not a refusal.

Pieces:
- `ProxyGate`, an asyncio.Protocol placed in front of a server's own protocol (`gate_factory`): it reads
  the header, then hands the transport to the inner protocol (`set_protocol`), which from then on gets
  the bytes directly. The inner protocol is given a `ProxiedTransport`, which answers `peername` with
  the client's address and is the real transport for everything else.
- `SocketGate`, the same for servers that read raw non-blocking sockets (the transit relay's TCP port):
  it reads the header, then calls back with the socket, the client's address and the bytes after it.
- `ProxyPolicy`: the settings and counters shared by one server's gates, and its metrics collector;
  `proxy_policy(service, enabled, registry)` makes one (or None when the option is off).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import Counter
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from burrow.wire.proxy_protocol import HeaderReader, ProxyHeader, ProxyProtocolError

log = logging.getLogger("burrow.proxy_protocol")
REASONS = ("missing", "malformed", "too_long", "timeout", "busy")
_TEXT = {
    "missing": "a PROXY protocol header is required on this port (connect through the load balancer)",
    "malformed": "malformed PROXY protocol header",
    "too_long": "PROXY protocol header too long",
    "timeout": "no PROXY protocol header in time",
    "busy": "too many connections waiting for a PROXY protocol header",
}


def refusal_line(reason: str) -> bytes:
    """The reply for line-based protocols (the transit relay): `error: <text>\\n`."""
    return f"error: {_TEXT.get(reason, reason)}\n".encode()


def refusal_http(reason: str) -> bytes:
    """The reply for HTTP ports (the mailbox, the packet relay's plain-HTTP port): a 400 that says why."""
    body = (_TEXT.get(reason, reason) + "\n").encode()
    return (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def refusal_none(reason: str) -> bytes:
    """For ports whose first bytes are TLS or binary frames: nothing a client could read; just close."""
    return b""


class ProxyPolicy:
    """One server's PROXY protocol settings and counters (shared by all its listeners)."""

    def __init__(self, service: str, timeout: float = 10.0, max_waiting: int = 4096) -> None:
        self.service = service
        self.timeout = timeout            # seconds a connection may take to send its header
        self.max_waiting = max_waiting    # connections without a header yet, at most (0 = unlimited)
        self.waiting = 0
        self.refusals: Counter[str] = Counter()
        self.headers: Counter[str] = Counter()  # accepted headers: v1, v2, local
        self.sockets: set[SocketGate] = set()  # raw-socket gates still waiting (closed by close_all)

    def admit(self) -> bool:
        """A connection arrived: may it wait for its header?"""
        if self.max_waiting and self.waiting >= self.max_waiting:
            self.refuse("busy", None)
            return False
        self.waiting += 1
        return True

    def done_waiting(self) -> None:
        self.waiting = max(0, self.waiting - 1)

    def accepted(self, header: ProxyHeader) -> None:
        self.headers["local" if header.local or header.source is None else f"v{header.version}"] += 1

    def refuse(self, reason: str, peer: Any) -> None:
        self.refusals[reason] += 1
        log.debug("refused a connection from %s: %s", peer, _TEXT.get(reason, reason))

    def collector(self) -> Collector:
        return _Collector(self)

    def close_all(self) -> None:
        """Server stopping: close the raw sockets still waiting for their header."""
        for gate in list(self.sockets):
            gate.close()


def proxy_policy(service: str, enabled: bool, registry: CollectorRegistry | None) -> ProxyPolicy | None:
    """The policy of a server started with `--proxy-protocol` (metrics registered), else None."""
    if not enabled:
        return None
    policy = ProxyPolicy(service)
    if registry is not None:
        registry.register(policy.collector())
    log.info("%s: every client connection must start with a PROXY protocol header", service)
    return policy


class _Collector(Collector):
    def __init__(self, policy: ProxyPolicy) -> None:
        self.policy = policy

    def collect(self):
        p = self.policy
        prefix = f"burrow_{p.service}_proxy_protocol"
        refused = CounterMetricFamily(f"{prefix}_refusals", "connections refused for their PROXY protocol "
                                      "header: missing, malformed, too_long, timeout, busy", labels=["reason"])
        for reason in REASONS:
            refused.add_metric([reason], p.refusals.get(reason, 0))
        yield refused
        headers = CounterMetricFamily(f"{prefix}_headers", "PROXY protocol headers accepted, by version "
                                      "(local: the balancer's own connection, no client address)",
                                      labels=["version"])
        for version in ("v1", "v2", "local"):
            headers.add_metric([version], p.headers.get(version, 0))
        yield headers
        yield GaugeMetricFamily(f"{prefix}_waiting", "connections that have not sent their header yet",
                                value=p.waiting)


class ProxiedTransport:
    """The real transport, except that `peername` is the client named in the PROXY header."""

    def __init__(self, transport: asyncio.Transport, peername: tuple | None) -> None:
        self._transport = transport
        self._peername = peername
        # the hot calls bound once, so the inner protocol pays nothing per write
        self.write = transport.write
        self.writelines = transport.writelines
        self.is_closing = transport.is_closing
        self.close = transport.close
        self.abort = transport.abort
        self.get_write_buffer_size = transport.get_write_buffer_size
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername" and self._peername is not None:
            return self._peername
        return self._transport.get_extra_info(name, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HeaderWait:
    """What both gates do with a connection's first bytes: parse the header, count it, and hold a header
    without a client (LOCAL: the balancer's health check) until a byte follows, so a check that just
    closes is nobody's session."""

    def __init__(self, policy: ProxyPolicy) -> None:
        self.policy = policy
        self.reader = HeaderReader()
        self.seen = False
        self.held: ProxyHeader | None = None

    def feed(self, data: bytes) -> tuple[ProxyHeader, bytes] | str | None:
        """(header, bytes after it) to hand over; a refusal reason; or None: wait for more."""
        if self.held is not None:
            header, self.held = self.held, None
            return header, data
        self.seen = True
        try:
            got = self.reader.feed(data)
        except ProxyProtocolError as exc:
            return exc.reason
        if got is None:
            return None
        header, rest = got
        self.policy.accepted(header)
        if header.source is None and not rest:
            self.held = header
            return None
        return header, rest

    def eof_reason(self) -> str | None:
        """Closed by the client now: "malformed" after part of a header, else None (a health check)."""
        return "malformed" if self.seen and self.held is None else None


def client_address(header: ProxyHeader, transport: asyncio.BaseTransport) -> tuple | None:
    """The address the server should see: the header's source, or the socket's own for LOCAL/UNKNOWN."""
    return header.source if header.source is not None else transport.get_extra_info("peername")


class ProxyGate(asyncio.Protocol):
    """Reads the PROXY header in front of `inner`, then steps aside."""

    def __init__(self, inner: asyncio.Protocol, policy: ProxyPolicy,
                 refusal: Callable[[str], bytes] = refusal_none) -> None:
        self.inner = inner
        self.policy = policy
        self.refusal = refusal
        self.header = HeaderWait(policy)
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.waiting = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.policy.admit():
            transport.abort()
            return
        self.waiting = True
        self.timer = asyncio.get_running_loop().call_later(self.policy.timeout, self._refuse, "timeout")

    def data_received(self, data: bytes) -> None:
        got = self.header.feed(data)
        if got is None:
            return
        if isinstance(got, str):
            self._refuse(got)
            return
        header, rest = got
        self._stop_waiting()
        transport = self.transport
        transport.set_protocol(self.inner)
        self.inner.connection_made(ProxiedTransport(transport, client_address(header, transport)))
        if rest and not transport.is_closing():
            self.inner.data_received(rest)

    def eof_received(self) -> bool | None:
        reason = self.header.eof_reason()
        if reason:
            self._refuse(reason)
        else:
            self._stop_waiting()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()

    def _refuse(self, reason: str) -> None:
        self.timer = None if reason == "timeout" else self.timer
        self._stop_waiting()
        t = self.transport
        self.policy.refuse(reason, t.get_extra_info("peername") if t else None)
        if t is not None and not t.is_closing():
            reply = self.refusal(reason)
            if reply:
                with contextlib.suppress(Exception):
                    t.write(reply)
            t.close()

    def _stop_waiting(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.waiting:
            self.waiting = False
            self.policy.done_waiting()


def gate_factory(factory: Callable[[], asyncio.Protocol], policy: ProxyPolicy | None,
                 refusal: Callable[[str], bytes] = refusal_http) -> Callable[[], asyncio.Protocol]:
    """`factory` itself without a policy; else one that puts a ProxyGate in front of each connection."""
    if policy is None:
        return factory
    return lambda: ProxyGate(factory(), policy, refusal)


def gate_connection(cls: Callable[..., asyncio.Protocol], policy: ProxyPolicy | None,
                    refusal: Callable[[str], bytes] = refusal_http) -> Callable[..., asyncio.Protocol]:
    """For libraries that take a connection class (websockets' `create_connection`): gate each one."""
    if policy is None:
        return cls
    return lambda *args, **kwargs: ProxyGate(cls(*args, **kwargs), policy, refusal)


class SocketGate:
    """Reads the PROXY header from a raw non-blocking socket, then `done(sock, client_address, rest)`.

    Refused connections get `refusal(reason)` (best effort) and are closed; `done` is not called.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, peer: tuple,
                 policy: ProxyPolicy, done: Callable[[socket.socket, tuple, bytes], None],
                 refusal: Callable[[str], bytes] = refusal_line) -> None:
        self.loop, self.sock, self.peer = loop, sock, peer
        self.fd = sock.fileno()
        self.policy, self.done, self.refusal = policy, done, refusal
        self.header = HeaderWait(policy)
        self.timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        if not self.policy.admit():
            self.sock.close()
            return
        self.policy.sockets.add(self)
        self.loop.add_reader(self.fd, self._readable)
        self.timer = self.loop.call_later(self.policy.timeout, self._refuse, "timeout")

    def _readable(self) -> None:
        try:
            data = self.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            reason = self.header.eof_reason()
            if reason:
                self._refuse(reason)
            else:
                self.close()
            return
        got = self.header.feed(data)
        if got is None:
            return
        if isinstance(got, str):
            self._refuse(got)
            return
        header, rest = got
        self._stop_waiting()
        self.done(self.sock, header.source if header.source is not None else self.peer, rest)

    def _refuse(self, reason: str) -> None:
        self.policy.refuse(reason, self.peer)
        reply = self.refusal(reason)
        if reply:
            with contextlib.suppress(OSError):
                self.sock.send(reply)
        self.close()

    def close(self) -> None:
        self._stop_waiting()
        self.sock.close()

    def _stop_waiting(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self in self.policy.sockets:
            self.policy.sockets.discard(self)
            self.policy.done_waiting()
            self.loop.remove_reader(self.fd)
