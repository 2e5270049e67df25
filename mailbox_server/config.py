"""Mailbox server configuration: every field is a flag (`--max-message-bytes`) and an env variable
(`BURROW_MAILBOX_MAX_MESSAGE_BYTES`)."""

from __future__ import annotations

from dataclasses import dataclass

from burrow.common.config import setting

from .limits import Limits


@dataclass(frozen=True)
class MailboxConfig:
    """Magic-Wormhole mailbox (rendezvous) server: WebSocket at ws://HOST:PORT/v1."""

    host: str = setting("::", "listen address; '::' is dual-stack (IPv4 too), falls back to 0.0.0.0 "
                              "where IPv6 is unavailable")
    port: int = setting(4000, "WebSocket port (0 = pick a free one)")
    db: str = setting("mailbox.sqlite", "SQLite database for channel state (':memory:' keeps nothing)")
    db_fsync: bool = setting(True, "fsync every grouped commit (--no-db-fsync: a commit survives a crash of "
                                   "the server but not of the machine)")
    redis_url: str | None = setting(None, "keep channel state in Redis so several replicas serve the same "
                                          "channels (redis://, rediss://, unix://, or any node of a Redis "
                                          "Cluster); default: this process, persisted with --db")
    replica_id: str | None = setting(None, "this replica's name in Redis, metrics and the event log; unique "
                                           "among replicas (default: node name and process id)")
    redis_wait: float = setting(30.0, "while Redis is unreachable, how long a connected client's request "
                                      "waits for it before the connection is closed (code 1013) so the "
                                      "client reconnects later", "s")
    drain_timeout: float = setting(10.0, "on SIGTERM: stop accepting, ask every client to reconnect "
                                         "(close code 1012), and exit once they are gone or after this", "s")
    drain_quiet: float = setting(0.25, "while draining, a client is asked to reconnect once nothing has "
                                       "crossed its connection for this long (all are asked by half the "
                                       "drain timeout): one just sent a message is likely answering it", "s")
    event_log: str | None = setting(None, "append JSON-lines usage events to this file")
    admin_host: str = setting("127.0.0.1", "address of the metrics/health HTTP server")
    admin_port: int = setting(9400, "port of /metrics /healthz /readyz (0 = any free port)", off=-1)
    node_name: str | None = setting(None, "node name in the event log (default: host name)")
    stats_interval: float = setting(60.0, "period of the `stats` event log line", "s")
    blur_usage: float | None = setting(None, "round event-log times down to this many seconds and byte "
                                             "counts up (addresses are never logged)", "s")
    motd: str | None = setting(None, "message of the day shown by clients (welcome.motd)")
    advertise_version: str | None = setting(None, "current CLI version advertised in the welcome")
    signal_error: str | None = setting(None, "welcome.error: every client shows it and gives up")
    disallow_list: bool = setting(False, "answer `list` with no nameplates (no code completion)")
    max_message_bytes: int = setting(1 << 20, "largest phase+body of one `add` (0 = no limit)", "bytes")
    max_messages_per_mailbox: int = setting(1000, "messages one mailbox may hold (0 = no limit)")
    max_mailbox_bytes: int = setting(8 << 20, "message bytes one mailbox may hold (0 = no limit)", "bytes")
    max_stored_bytes: int = setting(1 << 30, "message bytes the whole server holds (0 = no limit)", "bytes")
    max_mailboxes_per_connection: int = setting(4, "distinct mailboxes one connection may claim/open/close")
    max_mailboxes: int = setting(100_000, "mailboxes the whole server holds before refusing new ones")
    max_connections: int = setting(20_000, "open WebSocket connections in total (0 = no limit)")
    max_connections_per_ip: int = setting(200, "open connections from one client address (0 = no limit)")
    messages_per_second: float = setting(100.0, "sustained messages per connection (0 = no limit)", "messages/s",
                                         name="message_rate", aliases=("messages_per_second",))
    burst_messages: float = setting(500.0, "burst allowance of the per-connection message rate", "messages",
                                    name="message_burst", aliases=("burst_messages",))
    bind_deadline: float = setting(30.0, "close connections that have not sent `bind` by then", "s")
    idle_timeout: float = setting(600.0, "close connections silent (no frames, no pongs) this long", "s")
    ping_interval: float = setting(60.0, "send WebSocket pings to connections quiet this long", "s")
    channel_expiry: float = setting(660.0, "delete nameplates/mailboxes idle this long", "s")
    prune_interval: float = setting(300.0, "how often to look for expired channels", "s")
    max_write_buffer: int = setting(4 << 20, "drop a client that leaves this much unread output", "bytes")
    trust_x_real_ip: bool = setting(False, "count per-IP limits by the X-Real-IP header (behind a proxy); "
                                           "your-address always honours it")
    proxy_protocol: bool = setting(False, "every connection starts with a PROXY protocol header (v2 or v1) "
                                         "naming the client (HAProxy `send-proxy-v2`); without one it is refused")
    loop: str = setting("uvloop", "event loop: uvloop (libuv; less CPU per client message) or asyncio (Python's "
                                  "own)")
    verbose: bool = setting(False, "debug logging")

    def limits(self) -> Limits:
        return Limits(max_message_bytes=self.max_message_bytes,
                      max_messages_per_mailbox=self.max_messages_per_mailbox,
                      max_mailbox_bytes=self.max_mailbox_bytes, max_stored_bytes=self.max_stored_bytes,
                      max_mailboxes_per_connection=self.max_mailboxes_per_connection,
                      max_mailboxes=self.max_mailboxes,
                      messages_per_second=self.messages_per_second,
                      burst_messages=self.burst_messages)

    def welcome(self) -> dict[str, str]:
        info: dict[str, str] = {}
        if self.motd is not None:
            info["motd"] = self.motd
        if self.advertise_version:
            info["current_cli_version"] = self.advertise_version
        if self.signal_error:
            info["error"] = self.signal_error
        return info
