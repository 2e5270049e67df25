"""The relay's HTTP endpoints (one request per connection, then close or upgrade).

/derp                          Upgrade: DERP -> 101 (none with Derp-Fast-Start: 1), then DERP frames;
                               Upgrade: websocket + subprotocol derp -> WebSocket 101, DERP inside;
                               Upgrade: websocket without it -> raw DERP framing, as derper does
/derp/probe, /derp/latency-check  GET/HEAD -> 200 empty, CORS *
/generate_204                  204; echoes X-Tailscale-Challenge as X-Tailscale-Response (and iroh's
                               X-Iroh-Challenge as X-Iroh-Response)
/                              small status page;  /robots.txt  disallow all
`server.extra_routes[path](conn, request, rest)` (an interfaces.Route) lets another protocol (iroh)
claim a path.
"""

from __future__ import annotations

import html
import re

from burrow.wire.http import Request, response, websocket_accept
from burrow.wire.websocket import WebSocketStream

from .interfaces import HttpConnection, RouteHost

CHALLENGE_RE = re.compile(r"^[A-Za-z0-9._\-:]{1,64}$")
NO_CACHE = "no-cache, no-store, must-revalidate, no-transform, max-age=0"


def handle_request(conn: HttpConnection, req: Request, rest: bytes) -> None:
    server = conn.server
    path = req.path
    head = req.method == "HEAD"
    extra = server.extra_routes.get(path)
    if extra is not None:
        extra(conn, req, rest)
        return
    if path in ("/derp/probe", "/derp/latency-check"):
        server.stats.http["probe"] += 1
        if req.method not in ("GET", "HEAD"):
            return _reply(conn, response(405, body=b"bogus probe method\n"))
        return _reply(conn, response(200, {"Access-Control-Allow-Origin": "*"}))
    if path == "/generate_204":
        server.stats.http["generate_204"] += 1
        headers = {"Cache-Control": NO_CACHE}
        challenge = req.header("x-tailscale-challenge")
        if challenge and CHALLENGE_RE.match(challenge):
            headers["X-Tailscale-Response"] = "response " + challenge
        challenge = req.header("x-iroh-challenge")
        if challenge and CHALLENGE_RE.match(challenge):
            headers["X-Iroh-Response"] = "response " + challenge
        return _reply(conn, response(204, headers))
    if path == "/derp":
        return _derp(conn, req, rest)
    if path == "/robots.txt":
        server.stats.http["robots"] += 1
        return _reply(conn, response(200, {"Content-Type": "text/plain"}, b"User-agent: *\nDisallow: /\n",
                                     head_only=head))
    if path == "/":
        server.stats.http["status"] += 1
        return _reply(conn, response(200, {"Content-Type": "text/html; charset=utf-8"},
                                     status_page(server), head_only=head))
    server.stats.http["not_found"] += 1
    return _reply(conn, response(404, {"Content-Type": "text/plain"}, b"not found\n", head_only=head))


def _reply(conn: HttpConnection, data: bytes) -> None:
    conn.write_raw(data)
    conn.close("client")


def _derp(conn: HttpConnection, req: Request, rest: bytes) -> None:
    server = conn.server
    upgrade = req.header("upgrade").strip().lower()
    if upgrade == "websocket" and "derp" in req.tokens("sec-websocket-protocol"):
        key = req.header("sec-websocket-key")
        if req.header("sec-websocket-version") != "13" or not key:
            server.stats.http["bad_request"] += 1
            return _reply(conn, response(400, {"Sec-WebSocket-Version": "13"}, b"bad WebSocket handshake\n"))
        conn.write_raw(response(101, {
            "Upgrade": "websocket", "Connection": "Upgrade",
            "Sec-WebSocket-Accept": websocket_accept(key), "Sec-WebSocket-Protocol": "derp"}))
        return conn.start_derp("websocket", rest, WebSocketStream(client=False))
    if upgrade not in ("derp", "websocket"):
        server.stats.http["no_upgrade"] += 1
        return _reply(conn, response(426, {"Content-Type": "text/plain"}, b"DERP requires connection upgrade\n"))
    if req.header("derp-fast-start") != "1":
        conn.write_raw(response(101, {
            "Upgrade": "DERP", "Connection": "Upgrade", "Derp-Version": "2",
            "Derp-Public-Key": server.public_key.hex()}))
    conn.start_derp("upgrade", rest, None)


def status_page(server: RouteHost) -> bytes:
    s = server.stats
    rows = [
        ("server public key", "nodekey:" + server.public_key.hex()),
        ("clients", str(sum(s.clients.values()))),
        ("packets forwarded", str(sum(s.packets.values()))),
        ("packets dropped", str(sum(s.drops.values()))),
        ("access control", "on" if server.access.enabled else "off"),
        ("STUN", f"udp {server.stun_port}" if server.stun_port else "off"),
    ]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return (f"<!doctype html><html><head><title>burrow relay</title></head><body>"
            f"<h1>burrow packet relay</h1><p>DERP v2 at <code>/derp</code>"
            f"{'; iroh relay (v2, v1) at <code>/relay</code>' if '/relay' in server.extra_routes else ''}.</p>"
            f"<table>{body}</table></body></html>\n").encode()
