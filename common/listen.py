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
from collections.abc import Iterator

log = logging.getLogger("burrow.listen")
BACKLOG = 1024  # connections the kernel queues before the server accepts them


def tcp_listener(host: str, port: int, *, backlog: int = BACKLOG) -> socket.socket:
    """A bound, listening, non-blocking TCP socket for `host:port` (port 0: any free port)."""
    if host in ("", "::"):
        try:
            return _listen(socket.AF_INET6, ("::", port), backlog, dual_stack=True)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise
            log.warning("IPv6 unavailable (%s); listening on 0.0.0.0", exc)
            return _listen(socket.AF_INET, ("0.0.0.0", port), backlog)
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    return _listen(family, address, backlog)


def _listen(family: int, address: tuple, backlog: int, dual_stack: bool = False) -> socket.socket:
    # IPPROTO_TCP, not 0: accepted sockets inherit it, and asyncio turns Nagle off (TCP_NODELAY) only on
    # sockets whose proto says TCP; with proto 0 every small write waits out the peer's delayed ACK (40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual_stack else 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        where = f"[{address[0]}]:{address[1]}" if family == socket.AF_INET6 else f"{address[0]}:{address[1]}"
        raise OSError(exc.errno, f"cannot listen on {where}: {(exc.strerror or str(exc)).lower()}") from exc
    return sock


def accept_ready(lsock: socket.socket, what: str, burst: int = 64) -> Iterator[tuple[socket.socket, object]]:
    """The connections the kernel has completed on the non-blocking `lsock`, made non-blocking; at most
    `burst` per call, so other work gets its turn. An accept error (EMFILE and friends) is logged and ends
    the burst: the next wake-up tries again."""
    for _ in range(burst):
        try:
            sock, addr = lsock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.warning("%s accept failed: %s", what, exc)
            return
        sock.setblocking(False)
        yield sock, addr


def display(host: str) -> str:
    """How a bound host reads in start-up lines: `[::]` for dual-stack, as-is otherwise."""
    return "[::]" if host in ("", "::") else host
