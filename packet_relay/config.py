"""burrow-relay configuration: every field is a flag `--field-name` and env `BURROW_RELAY_FIELD_NAME`."""

from __future__ import annotations

from dataclasses import dataclass

from burrow.common.config import setting


@dataclass(frozen=True)
class RelayConfig:
    """DERP-compatible packet relay over HTTPS, with STUN on UDP."""

    host: str = setting("::", "address to bind the HTTPS, HTTP, STUN and messaging listeners to; '::' is dual-stack "
                                "(IPv4 too)")
    https_port: int = setting(8443, "HTTPS (TLS) port for DERP and the HTTP endpoints (0 = any free port)", off=-1)
    http_port: int = setting(0, "plain-HTTP port, for running behind a TLS-terminating proxy", off=0)
    tls_cert: str | None = setting(None, "PEM certificate chain for HTTPS")
    tls_key: str | None = setting(None, "PEM private key for HTTPS")
    dev_tls: bool = setting(False, "generate a self-signed certificate into --tls-dir (development)")
    tls_dir: str = setting("var/tls", "where --dev-tls keeps its certificate")
    stun_port: int = setting(3478, "UDP port for STUN", off=0)
    stun_capacity: float = setting(20000.0, "STUN requests answered in all before per-source limits apply "
                                   "(0 = always limit per source)", "requests/s")
    stun_port2: int = setting(0, "second UDP port answering STUN (0 = off): clients compare the mappings they "
                              "get on both ports to tell endpoint-dependent (symmetric) NATs apart")
    stun_rate_per_source: float = setting(20.0, "STUN requests answered per source address while above "
                                          "--stun-capacity (0 = unlimited)", "requests/s")
    stun_burst: int = setting(40, "STUN burst per source address while above --stun-capacity", "requests",
                              name="stun_burst_per_source", aliases=("stun_burst",))
    qad_port: int = setting(0, "UDP port for QUIC address discovery, how iroh endpoints learn their public "
                            "address (iroh uses 7842; needs HTTPS's certificate)", off=0)
    qad_max_connections: int = setting(10000, "QUIC address-discovery connections open at once", "connections")
    key_file: str | None = setting(None, "server private key file, created (0600) if missing; "
                                   "without it the key changes on every start")
    event_log: str | None = setting(None, "append JSON event lines here")
    admin_host: str = setting("127.0.0.1", "admin HTTP address (/metrics /healthz /readyz); "
                              "use 0.0.0.0 in containers")
    admin_port: int = setting(9402, "admin HTTP port (0 = any free port)")
    node_name: str | None = setting(None, "instance name in the event log (default: host name)")
    stats_interval: float = setting(60.0, "seconds between `stats` event lines", "s")
    blur_usage: float | None = setting(None, "round event-log times and sizes to this many seconds", "s")
    allow_list: str | None = setting(None, "file of allowed client public keys (hex), reloaded on SIGHUP")
    access_callout_url: str | None = setting(None, "URL that must answer {\"allow\": true} for each client "
                                             "(fails closed)")
    access_callout_timeout: float = setting(5.0, "timeout of one access callout", "s")
    mesh_key_file: str | None = setting(None, "file with the 64-hex mesh key; clients presenting it may "
                                        "WatchConns, ClosePeer and ForwardPacket")
    mesh_with: str | None = setting(None, "peer relays to mesh with, comma-separated: https://host:port or "
                                    "http://host:port, or dns+https://name:port for every address a DNS "
                                    "name resolves to (a headless Service); this node may be listed too")
    mesh_ca_file: str | None = setting(None, "CA bundle to verify https:// mesh peers (default: the system's)")
    mesh_resolve_interval: float = setting(30.0, "seconds between lookups of dns+ mesh names", "s")
    rate_limit_bytes_per_sec: int = setting(0, "per-client receive rate (0 = unlimited); over it, reading "
                                            "pauses (TCP back-pressure)", "bytes/s",
                                            name="receive_rate", aliases=("rate_limit_bytes_per_sec",))
    rate_limit_burst_bytes: int = setting(0, "per-client burst (raised to at least 64 KiB + 32)", "bytes",
                                          name="receive_burst", aliases=("rate_limit_burst_bytes",))
    wake_coalesce_us: int | None = setting(None, "hold the poll after a wake-up so the next one serves more "
                                              "packets with one read and one TLS record per client: by default "
                                              "only while traffic is dense (16+ packets per wake-up), for at most "
                                              "4000 µs; a number holds every wake-up that long (at most 10000), "
                                              "0 never holds", "µs")
    send_queue_depth: int = setting(32, "packets queued per client before the oldest is dropped", "packets")
    max_packet_bytes: int = setting(65536, "largest packet payload a client may send", "bytes")
    max_client_info_bytes: int = setting(262144, "largest ClientInfo frame accepted", "bytes")
    handshake_timeout: float = setting(10.0, "seconds from connect to a finished DERP handshake", "s")
    write_timeout: float = setting(10.0, "close a client whose socket accepts nothing for this long", "s")
    keepalive_interval: float = setting(60.0, "KeepAlive period (plus up to 5 s of jitter)", "s")
    max_connections: int = setting(0, "connections in total (0 = unlimited)")
    max_connections_per_ip: int = setting(0, "connections per client address (0 = unlimited)")
    proxy_protocol: bool = setting(False, "every HTTP/HTTPS connection starts with a PROXY protocol header (v2 or "
                                         "v1) naming the client (HAProxy `send-proxy-v2`); without one it is "
                                         "refused")
    max_dups_per_key: int = setting(8, "connections per public key; the oldest beyond it is closed")
    restart_reconnect: float = setting(1.0, "Restarting frame: ask clients to reconnect after", "s")
    restart_try_for: float = setting(60.0, "Restarting frame: and to keep trying for", "s")
    shutdown_grace: float = setting(1.0, "seconds to let Restarting frames drain before closing", "s")
    iroh: bool = setting(True, "serve iroh endpoints too: /relay (iroh-relay-v2/v1 WebSocket) and /ping")
    iroh_tokens_file: str | None = setting(None, "file of bearer tokens (one per line), one of which iroh "
                                           "endpoints must present; re-read on SIGHUP (none = no token)")
    iroh_ping_interval: float = setting(15.0, "Ping iroh endpoints this often (plus 1-5 s jitter)", "s")
    iroh_pong_timeout: float = setting(5.0, "close an iroh endpoint that leaves a Ping unanswered this long",
                                       "s")
    iroh_tls_auth: bool = setting(True, "accept iroh's TLS-exporter header login over HTTPS")
    messaging_port: int = setting(0, "TCP port for seed 003 messaging links", off=0)
    messaging_key_file: str | None = setting(None, "the messaging server's secp256k1 secret key (64 hex), created "
                                             "(0600) if missing; without it the key changes on every start")
    messaging_address: str | None = setting(None, "host:port that messaging clients dial, published in discovery "
                                            "(default: the listener's, 127.0.0.1 for a wildcard host)")
    discovery_url: str | None = setting(None, "messaging discovery to publish this server's entry in "
                                        "(e.g. http://discovery:4003)")
    discovery_refresh: float = setting(20.0, "seconds between discovery entry refreshes (keep below the "
                                       "discovery's --entry-ttl)", "s")
    messaging_max_links: int = setting(10000, "messaging links at once (the entry's available_connections "
                                       "counts down from it)")
    verbose: bool = setting(False, "debug logging")
