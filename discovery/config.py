"""burrow-discovery configuration: every field is a flag `--field-name` and env `BURROW_DISCOVERY_FIELD_NAME`."""

from __future__ import annotations

from dataclasses import dataclass

from burrow.common.config import setting


@dataclass(frozen=True)
class DiscoveryConfig:
    """Messaging discovery (Skywire's protocol): signed entries of messaging clients and servers, by public key."""

    host: str = setting("::", "address to bind the HTTP API to; '::' is dual-stack (IPv4 too)")
    port: int = setting(4003, "HTTP port of the API under /messaging-discovery/ (0 = ephemeral)")
    redis_url: str | None = setting(None, "keep entries in Redis (redis://, rediss://, unix://, or a cluster "
                                    "URL) so several replicas serve one view; default: this process's memory")
    entry_ttl: float = setting(60.0, "an entry expires this long after it was last written unless refreshed", "s")
    max_clock_skew: float = setting(60.0, "refuse entries whose timestamp is further in the future than this", "s")
    max_body_bytes: int = setting(16384, "largest POST body accepted", "bytes")
    max_servers_listed: int = setting(100, "most server entries one available_servers answer lists", "entries")
    event_log: str | None = setting(None, "append JSON event lines here")
    admin_host: str = setting("127.0.0.1", "admin HTTP address (/metrics /healthz /readyz); "
                              "use 0.0.0.0 in containers")
    admin_port: int = setting(9403, "admin HTTP port (0 = ephemeral)")
    node_name: str | None = setting(None, "instance name in the event log (default: host name)")
    stats_interval: float = setting(60.0, "seconds between `stats` event lines", "s")
    verbose: bool = setting(False, "debug logging")

    def __post_init__(self) -> None:
        if self.entry_ttl <= 0:
            raise ValueError("--entry-ttl must be positive")
