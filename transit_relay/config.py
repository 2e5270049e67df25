"""Configuration of burrow-transit: every field is a flag `--field-name` and env `BURROW_TRANSIT_FIELD_NAME`."""

from __future__ import annotations

from dataclasses import dataclass

from burrow.common.config import setting
from burrow.transit_relay.protocol import Limits


@dataclass(frozen=True)
class TransitConfig:
    """burrow-transit: the magic-wormhole `please relay` transit helper (TCP and WebSocket)."""

    host: str = setting("::", "address to listen on for TCP and WebSocket clients; '::' is dual-stack (IPv4 too)")
    port: int = setting(4001, "TCP port for `please relay` clients (0 = any free port)")
    websocket_port: int = setting(4002, "WebSocket transit port (0 = any free port)", off=-1)
    admin_host: str = setting("127.0.0.1", "address of the admin HTTP server (/metrics /healthz /readyz)")
    admin_port: int = setting(9401, "admin HTTP port (0 = any free port)", off=-1)
    event_log: str | None = setting(None, "append one JSON line per session here (docs/events.md)")
    node_name: str | None = setting(None, "name of this instance in the event log (default: host name)")
    stats_interval: float = setting(60.0, "seconds between `stats` event lines", unit="s")
    blur_usage: float | None = setting(None, "round event times down to this many seconds and byte counts "
                                             "up into coarse buckets (privacy)", unit="s")
    handshake_timeout: float = setting(30.0, "close connections that have not sent a complete handshake "
                                             "this long after connecting", unit="s")
    pending_timeout: float = setting(600.0, "close a handshaken connection whose partner has not come "
                                            "after this long (mood lonely)", unit="s")
    idle_timeout: float = setting(3600.0, "close a pair after this long with no byte in either direction; "
                                          "0 disables (Dilation sends keepalives every 30 s)", unit="s")
    drain_timeout: float = setting(0.0, "on SIGTERM: stop accepting clients, keep relaying the pairs in "
                                        "progress and (with --redis-url, reached by hops) the sides waiting "
                                        "for a partner for at most this long, so a rolling upgrade ends no "
                                        "transfer (0 = close everything at once)", unit="s")
    max_pending: int = setting(10000, "connections that may wait for a partner at once (0 = unlimited)")
    max_pairs: int = setting(10000, "pairs that may relay at once (0 = unlimited)")
    max_connections: int = setting(30000, "open client connections in total (0 = unlimited)")
    max_connections_per_ip: int = setting(256, "open client connections per source address (0 = unlimited)")
    splice: bool = setting(True, "TCP<->TCP pairs use zero-copy splice(2) where the OS has it")
    splice_threads: int = setting(256, "TCP<->TCP pairs that may be moved by two threads each making "
                                       "blocking splice calls (less CPU per GB: no event-loop wake-up per "
                                       "chunk); other pairs are moved from the event loop; 0 = all are")
    splice_threads_after: int = setting(8 << 20, "bytes a pair moves from the event loop before it gets "
                                                 "pump threads (starting them costs what a few MB of "
                                                 "relaying saves)", unit="bytes")
    pipe_size: int = setting(1048576, "pipe capacity per busy splice direction (caps relay memory)", unit="bytes")
    buffer_size: int = setting(1048576, "copy-path read buffer (one, shared by all pairs); read size and "
                                       "write limit of pairs with a WebSocket side", unit="bytes")
    websocket_max_message: int = setting(1048576, "largest WebSocket message accepted", unit="bytes")
    websocket_max_queue: int = setting(4, "WebSocket messages queued per connection before reading pauses")
    proxy_protocol: bool = setting(False, "every TCP and WebSocket client connection starts with a PROXY protocol "
                                         "header (v2 or v1) naming the client: run behind HAProxy "
                                         "`send-proxy-v2` or a load balancer that sends it; connections "
                                         "without one are refused")
    redis_url: str | None = setting(None, "pair sides that reach different replicas: each waiting side is "
                                          "registered in this Redis (redis://, rediss://, unix://, cluster) "
                                          "and a side arriving elsewhere is joined to it by a hop")
    peer_port: int = setting(4003, "TCP port on which replicas accept each other's hops (with --redis-url; "
                                   "0 = any free port)")
    advertise_address: str | None = setting(None, "HOST:PORT other replicas dial for hops to this one "
                                                  "(default: --host and --peer-port when --host is one address)")
    peer_secret_file: str | None = setting(None, "file holding the secret shared by all replicas; hops are "
                                                 "authenticated with it (required with --redis-url)")
    peer_pool_size: int = setting(8, "warm hop connections kept open to each peer replica (with --redis-url), "
                                     "so a cross-replica pairing dials nothing; 0 = dial one per hop")
    handover_dir: str | None = setting(None, "directory shared by replicas on one host (with --redis-url): "
                                             "a TCP side whose partner waits on such a replica is handed to "
                                             "it through a Unix socket here instead of joined by a hop")
    verbose: bool = setting(False, "debug logging")

    def __post_init__(self) -> None:
        for name in ("handshake_timeout", "pending_timeout", "stats_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.idle_timeout < 0:
            raise ValueError("idle_timeout must be >= 0")
        if self.pipe_size < 4096 or self.buffer_size < 1024:
            raise ValueError("pipe_size must be >= 4096 and buffer_size >= 1024")
        if self.peer_pool_size < 0:
            raise ValueError("peer_pool_size must be >= 0")
        if self.splice_threads < 0 or self.splice_threads_after < 0:
            raise ValueError("splice_threads and splice_threads_after must be >= 0")
        if self.redis_url and not self.peer_secret_file:
            raise ValueError("--redis-url needs --peer-secret-file (the replicas' shared hop secret)")

    def limits(self) -> Limits:
        return Limits(handshake_timeout=self.handshake_timeout, pending_timeout=self.pending_timeout,
                      idle_timeout=self.idle_timeout, max_pending=self.max_pending, max_pairs=self.max_pairs,
                      max_connections=self.max_connections, max_per_ip=self.max_connections_per_ip)
