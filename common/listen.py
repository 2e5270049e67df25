"""Listening sockets with one meaning of `--host` in every server.

`::` (every server's default) is one dual-stack socket: IPv6 and IPv4 (as mapped addresses) on one port;
where the host has no IPv6 it falls back to `0.0.0.0`. Any other value is one address, IPv4 or IPv6,
or a name resolved to its first address. asyncio's own servers set IPV6_V6ONLY on `::`, so the servers
build their sockets here and hand them over with `sock=`.
"""

from __future__ import annotations

import errno
import logging
import socket

log = logging.getLogger("burrow.listen")
BACKLOG = 1024  # connections the kernel queues before the server accepts them


def tcp_listener(host: str, port: int, *, backlog: int = BACKLOG) -> socket.socket:
    """A bound, listening, non-blocking TCP socket for `host:port` (port 0: any free port)."""
    if host in ("", "::"):
        try:
            sock = socket.create_server(("::", port), family=socket.AF_INET6, backlog=backlog,
                                        reuse_port=False, dualstack_ipv6=socket.has_dualstack_ipv6())
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise
            log.warning("IPv6 unavailable (%s); listening on 0.0.0.0", exc)
            sock = socket.create_server(("0.0.0.0", port), backlog=backlog)
    else:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.create_server(address[:2], family=family, backlog=backlog)
    sock.setblocking(False)
    return sock


def display(host: str) -> str:
    """How a bound host reads in start-up lines: `[::]` for dual-stack, as-is otherwise."""
    return "[::]" if host in ("", "::") else host
