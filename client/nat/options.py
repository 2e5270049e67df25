"""What the command line asks of NAT traversal: cheap to import, so a text transfer loads none of it."""

from __future__ import annotations

from dataclasses import dataclass


def parse_stun_server(spec: str, default_port: int = 3478) -> tuple[str, int]:
    """`HOST`, `HOST:PORT` or `[V6]:PORT`."""
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = spec.rpartition(":")
    return (host, int(port)) if sep and port.isdigit() and ":" not in host else (spec, default_port)


@dataclass(frozen=True)
class NatOptions:
    """How a client finds direct paths through NATs (CLI: --stun-server, --stun-port2, --no-portmap,
    --derp-relay)."""
    stun_server: tuple[str, int] | None = None
    stun_port2: int = 0
    portmap: bool = True
    upnp: bool = True
    # a DERP packet relay (burrow-relay): Dilation then also offers UDP hole punching (docs/nat.md)
    derp_url: str | None = None
    derp_ca_file: str | None = None
    derp_insecure: bool = False
