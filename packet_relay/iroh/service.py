"""The iroh side of the packet relay: HTTP routes, access checks, registration and forwarding.

One IrohService per RelayServer. It claims `/relay` (WebSocket upgrade, iroh-relay-v2/v1) and
`/ping` on the relay's HTTP(S) listeners through `server.extra_routes`, and shares the server's
registry (keyed `("iroh", endpoint_id)`, apart from DERP's Curve25519 keys), stats (protocol label
`iroh`), connection caps, rate limit, access control (allow-list keyed by endpoint id; the callout
gets an iroh-shaped request) and event log.

Duplicate ids follow upstream: the newest connection receives; older ones stay open, may send,
and get Status SameEndpointIdConnected (Health text for v1); when the active one leaves, the most
recent remaining one is promoted and told Healthy. EndpointGone goes to every endpoint a departed
id sent to (the `sent_to` map), once its last connection is gone.
"""

from __future__ import annotations

import collections
import hmac
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
from prometheus_client.core import CounterMetricFamily

from burrow.wire.http import Request, response, websocket_accept
from burrow.wire.iroh import frames as f
from burrow.wire.iroh.handshake import pick_subprotocol

from ..interfaces import HttpConnection, IrohHost
from . import tls_exporter
from .conn import IrohConn

log = logging.getLogger(__name__)
MAX_SENT_TO = 4096            # receivers remembered per source for EndpointGone
MAX_CALLOUT_BODY = 4096
RELAY_PATH = "/relay"
PING_PATH = "/ping"
AUTH_HEADER = "x-iroh-relay-client-auth-v1"


@dataclass(frozen=True)
class IrohSettings:
    enabled: bool = True
    tokens_file: str | None = None      # bearer tokens, one per line; None = no token needed
    ping_interval: float = 15.0
    pong_timeout: float = 5.0
    handshake_timeout: float = 10.0
    tls_auth: bool = True               # accept the TLS-exporter header login when TLS is on

    @classmethod
    def from_config(cls, config) -> IrohSettings:
        return cls(enabled=config.iroh, tokens_file=config.iroh_tokens_file,
                   ping_interval=config.iroh_ping_interval, pong_timeout=config.iroh_pong_timeout,
                   handshake_timeout=config.handshake_timeout, tls_auth=config.iroh_tls_auth)


def load_tokens(path: str) -> frozenset[str]:
    tokens = {line.split("#", 1)[0].strip() for line in Path(path).read_text().splitlines()}
    tokens.discard("")
    if not tokens:
        raise ValueError(f"{path}: no bearer tokens")
    return frozenset(tokens)


def request_token(req: Request) -> str | None:
    """`Authorization: Bearer <t>` (what iroh's RelayConfig.auth_token sends), else `?token=<t>`."""
    auth = req.header("authorization")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    values = parse_qs(urlsplit(req.target).query).get("token")
    return values[0] if values else None


class IrohService:
    def __init__(self, server: IrohHost, settings: IrohSettings | None = None) -> None:
        self.server = server
        self.settings = settings or IrohSettings()
        self.tokens = load_tokens(self.settings.tokens_file) if self.settings.tokens_file else None
        self.sent_to: dict[bytes, set[bytes]] = {}
        self._session: aiohttp.ClientSession | None = None
        self.logins: collections.Counter[str] = collections.Counter()  # mechanism -> logins
        # The exporter check runs once per process, before serving (it may start a child process).
        self.exporter = (self.settings.enabled and self.settings.tls_auth and server.config.https_port >= 0
                         and tls_exporter.available())
        if self.settings.enabled:
            server.extra_routes[RELAY_PATH] = self.relay_route
            server.extra_routes[PING_PATH] = self.ping_route
            if not getattr(server.prometheus, "_burrow_iroh_collector", False):
                server.prometheus.register(_Collector(self))
                server.prometheus._burrow_iroh_collector = True

    # ---- HTTP routes (called with the relay's HTTP connection and the parsed request)
    def ping_route(self, conn: HttpConnection, req: Request, rest: bytes) -> None:
        stats = self.server.stats
        stats.http["iroh_ping"] += 1
        if req.method not in ("GET", "HEAD"):
            return _reply(conn, response(405, body=b"method not allowed\n"))
        return _reply(conn, response(200, {"Access-Control-Allow-Origin": "*"}))

    def relay_route(self, conn: HttpConnection, req: Request, rest: bytes) -> None:
        stats = self.server.stats
        key = req.header("sec-websocket-key")
        version = pick_subprotocol(req.header("sec-websocket-protocol"))
        if (req.method != "GET" or "websocket" not in req.tokens("upgrade")
                or req.header("sec-websocket-version") != "13" or not key or version is None):
            stats.http["bad_request"] += 1
            return _reply(conn, response(400, {"Sec-WebSocket-Version": "13", "Content-Type": "text/plain"},
                                         b"expected a WebSocket upgrade offering iroh-relay-v2 or v1\n"))
        stats.http["iroh_relay"] += 1
        conn.write_raw(response(101, {"Upgrade": "websocket", "Connection": "Upgrade",
                                      "Sec-WebSocket-Accept": websocket_accept(key),
                                      "Sec-WebSocket-Protocol": version}))
        header_auth, key_material = self._header_login(conn, req)
        iroh = IrohConn(self, conn.transport, conn.tls, conn.peer_ip, version, request_token(req),
                        header_auth, key_material)
        _take_over(conn, iroh)
        iroh.begin(rest)

    def _header_login(self, conn: HttpConnection, req: Request) -> tuple[f.KeyMaterialClientAuth | None, bytes | None]:
        """The TLS-exporter login header, when TLS is on here (over http:// it means nothing)."""
        value = req.header(AUTH_HEADER)
        if not value or conn.tls is None or not self.settings.tls_auth:
            return None, None
        try:
            auth = f.KeyMaterialClientAuth.from_header(value)
        except f.IrohProtocolError:
            self.server.stats.errors[("iroh", "auth_header")] += 1
            return None, None  # a bad header costs the client the challenge round trip, nothing more
        ssl_object = getattr(conn.tls, "_obj", None)
        if not self.exporter or ssl_object is None:
            return auth, None
        return auth, tls_exporter.export_keying_material(ssl_object, tls_exporter.LABEL, auth.public_key, 32)

    # ---- access: bearer token, allow-list, callout (in that order; the first refusal wins)
    async def check_access(self, conn: IrohConn) -> tuple[str, str] | None:
        if self.tokens is not None and not any(hmac.compare_digest((conn.token or "").encode(), t.encode())
                                               for t in self.tokens):
            return "token", "bearer token missing or not accepted"
        access = self.server.access
        if not access.listed(conn.endpoint_id):
            return "allow_list", "endpoint id not on the relay's allow-list"
        if access.callout_url and not await self._callout(conn.endpoint_id, conn.peer_ip):
            return "callout", "refused by the relay's access check"
        return None

    async def _callout(self, endpoint_id: bytes, source_ip: str) -> bool:
        """POST to the shared callout URL, shaped for iroh (upstream's X-Iroh-NodeId header too).

        Admits on HTTP 200 with body `true` (upstream iroh-relay's http access) or `{"allow": true}`;
        anything else, errors and timeouts deny.
        """
        access = self.server.access
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=access.callout_timeout))
        hex_id = endpoint_id.hex()
        body = {"Protocol": "iroh", "EndpointId": hex_id, "Source": source_ip}
        try:
            async with self._session.post(access.callout_url, json=body,
                                          headers={"X-Iroh-NodeId": hex_id}) as resp:
                if resp.status != 200:
                    return False
                raw = await resp.content.read(MAX_CALLOUT_BODY)
            answer = json.loads(raw)
        except (TimeoutError, aiohttp.ClientError, ValueError, OSError) as exc:
            log.warning("iroh access callout failed, denying: %s", exc)
            return False
        if answer is True:
            return True
        return isinstance(answer, dict) and (answer.get("allow") is True or answer.get("Allow") is True)

    # ---- registry
    def register(self, conn: IrohConn) -> None:
        registry = self.server.registry
        before = registry.active(conn.key)
        conn.registered = True
        registry.register(conn)
        if before is not None and before is not conn and before.phase != "closed":
            before.set_status(f.STATUS_SAME_ENDPOINT_ID_CONNECTED)

    def unregister(self, conn: IrohConn) -> None:
        registry = self.server.registry
        was_active = registry.active(conn.key) is conn
        registry.unregister(conn)
        now_active = registry.active(conn.key)
        if now_active is not None:
            if was_active:
                now_active.set_status(f.STATUS_HEALTHY)
            return
        for dst in self.sent_to.pop(conn.endpoint_id, ()):
            receiver = registry.active(("iroh", dst))
            if receiver is not None:
                receiver.endpoint_gone(conn.endpoint_id)

    # ---- forwarding (hot path)
    def forward(self, sender: IrohConn, dst: bytes, kind: int, body: bytes, payload: int) -> None:
        server = self.server
        key = ("iroh", dst)
        receiver = server.registry.active(key)
        link = server.registry.remote(key, receiver)
        if link is not None:  # held by a peer relay of the mesh
            link.forward_iroh(sender.endpoint_id, dst, kind, body, sender)
            return
        if receiver is None:
            server.stats.drops[("iroh", "unknown_dest")] += 1  # no "not here" signal in iroh
            return
        receiver.deliver_frame(kind, sender.endpoint_id, body, payload)
        stats = server.stats
        stats.packets["iroh"] += 1
        stats.bytes["iroh"] += payload
        if dst != sender._last_dst:
            sender._last_dst = dst
            seen = self.sent_to.get(sender.endpoint_id)
            if seen is None:
                self.sent_to[sender.endpoint_id] = {dst}
            elif dst not in seen and len(seen) < MAX_SENT_TO:
                seen.add(dst)

    # ---- life cycle
    def restarting(self, reconnect_ms: int, try_for_ms: int) -> list[IrohConn]:
        """Graceful stop: Restarting to every authenticated endpoint; returns them for draining."""
        frame = f.Restarting(reconnect_ms, try_for_ms).encode()
        live = [c for c in self.server.conns if isinstance(c, IrohConn) and c.registered]
        for c in live:
            c.control(frame)
            c.flush()
        return live

    def reload(self) -> None:
        """SIGHUP: re-read the bearer tokens (new logins only); a broken file keeps the old set.

        Allow-list changes are applied by the server's reload for both protocols (by endpoint id).
        """
        path = self.settings.tokens_file
        if not path:
            return
        try:
            self.tokens = load_tokens(path)
        except (OSError, ValueError) as exc:
            log.error("iroh token file reload failed, keeping %d tokens: %s", len(self.tokens or ()), exc)
            return
        log.info("iroh tokens reloaded: %d", len(self.tokens))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class _Collector:
    """iroh-only metrics, registered on the relay's Prometheus registry next to the shared ones."""

    def __init__(self, service: IrohService) -> None:
        self.service = service

    def collect(self):
        c = CounterMetricFamily("burrow_relay_iroh_logins", "iroh endpoints authenticated, by mechanism",
                                labels=["mechanism"])
        for mechanism in ("challenge", "key_material"):
            c.add_metric([mechanism], self.service.logins.get(mechanism, 0))
        yield c


def _reply(conn: HttpConnection, data: bytes) -> None:
    conn.write_raw(data)
    conn.close("client")


def _take_over(conn: HttpConnection, iroh: IrohConn) -> None:
    """Retire the HTTP connection object without closing its socket; the iroh one owns it now."""
    for name in ("timer", "write_timer"):
        t = getattr(conn, name, None)
        if t is not None:
            t.cancel()
            setattr(conn, name, None)
    conn.phase = "closed"
    conn.server.conns.discard(conn)
    iroh.admitted_cap, conn.admitted_cap = conn.admitted_cap, False
    iroh.paused = conn.paused
    conn.transport.set_protocol(iroh)
