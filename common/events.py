"""The event log: one JSON object per line, the single definition every server and Spark job uses.

Each line has the envelope `v` (schema version), `ts` (epoch seconds when written), `service`,
`event` and `node`, plus the fields of its event type below. `docs/events.md` documents the same
table for people; `tests/common/test_events.py` keeps the two in step, and `spark/schemas.py` builds
its explicit Spark schemas from `SCHEMAS`.

Privacy: no event carries wormhole codes, nameplates, mailbox ids, sides, keys, tokens or IP
addresses. With a blur interval, times are rounded down to it and byte counts rounded up in buckets.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 1

# Field kinds: "int", "float", "str", "bool", "counts" (an object of str -> int).
@dataclass(frozen=True)
class Field:
    name: str
    kind: str
    doc: str
    nullable: bool = False
    blur: str | None = None  # "time" (round down) or "size" (round up) when blurring is on


ENVELOPE: tuple[Field, ...] = (
    Field("v", "int", "schema version of this line (1)"),
    Field("ts", "float", "epoch seconds when the line was written (the end of a session)", blur="time"),
    Field("service", "str", "`mailbox`, `transit`, `relay` or `discovery`"),
    Field("event", "str", "event type, see below"),
    Field("node", "str", "name of the server instance (`--node-name`, default the host name)"),
)

_STARTED = Field("started", "float", "epoch seconds when the session or connection began", blur="time")
_DURATION = Field("duration", "float", "seconds from `started` to the end")

SCHEMAS: dict[tuple[str, str], tuple[Field, ...]] = {
    ("mailbox", "connection"): (
        _STARTED, _DURATION,
        Field("app_id", "str", "application id from `bind`; null if the client never bound", nullable=True),
        Field("client_impl", "str", "implementation from `bind.client_version` (e.g. `python`)", nullable=True),
        Field("client_version", "str", "version from `bind.client_version` (e.g. `0.24.0`)", nullable=True),
        Field("messages_in", "int", "client messages received on this connection"),
        Field("errors", "int", "`error` replies sent on this connection"),
        Field("close_reason", "str", "`client`, `protocol`, `limit`, `timeout` or `shutdown`"),
    ),
    ("mailbox", "mailbox"): (
        Field("app_id", "str", "application id"),
        _STARTED, _DURATION,
        Field("waiting_time", "float", "seconds between the first and second side opening; null if only one side came", nullable=True),
        Field("mood", "str", "`happy`, `lonely`, `quiet`, `errory`, `scary`, `pruney` or `crowded` (the reference's usage result)"),
        Field("for_nameplate", "bool", "whether the mailbox was reached through a nameplate"),
        Field("sides", "int", "distinct sides that opened the mailbox"),
        Field("messages", "int", "messages added"),
        Field("bytes", "int", "bytes of message bodies added (hex as sent)", blur="size"),
    ),
    ("mailbox", "nameplate"): (
        Field("app_id", "str", "application id"),
        _STARTED, _DURATION,
        Field("waiting_time", "float", "seconds between the first and second claim; null if only one side claimed", nullable=True),
        Field("mood", "str", "`happy`, `lonely`, `pruney` or `crowded`"),
    ),
    ("mailbox", "stats"): (
        Field("interval", "float", "seconds covered by the counters ending in `_interval`"),
        Field("connections", "int", "open WebSocket connections"),
        Field("mailboxes", "int", "mailboxes currently stored"),
        Field("nameplates", "int", "nameplates currently claimed"),
        Field("messages_interval", "int", "messages added during the interval"),
    ),
    ("transit", "session"): (
        _STARTED, _DURATION,
        Field("waiting_time", "float", "seconds the first connection waited for its partner; null if unpaired", nullable=True),
        Field("mood", "str", "`happy`, `lonely`, `errory`, `jilted`, `redundant`, `impatient` or `empty`"),
        Field("transport", "str", "`tcp`, `websocket` or `mixed` (one of each)"),
        Field("bytes_from_first", "int", "bytes relayed from the connection that arrived first", blur="size"),
        Field("bytes_from_second", "int", "bytes relayed from the connection that arrived second", blur="size"),
        Field("total_bytes", "int", "sum of both directions, handshakes excluded", blur="size"),
    ),
    ("transit", "stats"): (
        Field("interval", "float", "seconds covered by the counters ending in `_interval`"),
        Field("pending", "int", "connections waiting for a partner"),
        Field("active_pairs", "int", "pairs currently relaying"),
        Field("bytes_interval", "int", "bytes relayed during the interval"),
    ),
    ("transit", "drain"): (
        Field("started", "float", "epoch seconds when the drain began (SIGTERM)", blur="time"),
        Field("duration", "float", "seconds the drain took"),
        Field("waiting", "int", "sides waiting for a partner when the drain began"),
        Field("pairs", "int", "pairs relaying when the drain began"),
        Field("left_waiting", "int", "connections still unpaired at the end (closed then)"),
        Field("left_pairs", "int", "pairs still relaying at the end (closed then)"),
        Field("ended", "str", "`done` (nothing left) or `deadline` (--drain-timeout reached)"),
    ),
    ("relay", "connection"): (
        _STARTED, _DURATION,
        Field("protocol", "str", "`derp` or `iroh`"),
        Field("transport", "str", "`upgrade` (HTTP Upgrade) or `websocket`"),
        Field("tls", "bool", "whether the client connected over TLS"),
        Field("home", "bool", "whether the client said this relay is its preferred (home) relay"),
        Field("packets_in", "int", "packets received from the client"),
        Field("packets_out", "int", "packets delivered to the client"),
        Field("bytes_in", "int", "payload bytes received from the client", blur="size"),
        Field("bytes_out", "int", "payload bytes delivered to the client", blur="size"),
        Field("drops", "counts", "packets dropped on the way to this client, by reason"),
        Field("close_reason", "str", "`client`, `protocol`, `denied`, `duplicate`, `timeout`, `limit` or `shutdown`"),
    ),
    ("relay", "messaging_link"): (
        _STARTED, _DURATION,
        Field("channels_opened", "int", "channels this client opened that the remote accepted"),
        Field("frames_in", "int", "messaging frames received from the client"),
        Field("frames_out", "int", "messaging frames sent to the client"),
        Field("sends_in", "int", "Send frames received from the client"),
        Field("sends_out", "int", "Send frames delivered to the client"),
        Field("bytes_in", "int", "ciphertext bytes received in Send frames", blur="size"),
        Field("bytes_out", "int", "ciphertext bytes delivered in Send frames", blur="size"),
        Field("close_reason", "str", "`client` (it closed), `protocol` (a bad frame), `duplicate` (a newer link "
                                     "of its key), `stalled` (its socket took nothing for --write-timeout) or "
                                     "`shutdown`"),
    ),
    ("discovery", "stats"): (
        Field("interval", "float", "seconds covered by the counters ending in `_interval`"),
        Field("entries", "int", "live entries (clients and servers)"),
        Field("servers", "int", "live server entries"),
        Field("writes_interval", "int", "entries written (new or a next iteration) during the interval"),
        Field("refused_interval", "int", "requests refused during the interval"),
    ),
    ("relay", "stats"): (
        Field("interval", "float", "seconds covered by the counters ending in `_interval`"),
        Field("clients", "int", "connected clients (all protocols)"),
        Field("packets_interval", "int", "packets forwarded during the interval"),
        Field("bytes_interval", "int", "payload bytes forwarded during the interval"),
        Field("drops_interval", "counts", "packets dropped during the interval, by reason"),
        Field("stun_interval", "int", "STUN binding requests answered during the interval"),
    ),
}

_PY_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "counts": (dict,),
}


class EventSchemaError(ValueError):
    """A server tried to write an event that does not match SCHEMAS."""


def blur_time(value: float, interval: float) -> float:
    return float(interval * math.floor(value / interval))


def blur_size(size: int) -> int:
    """Round sizes up into coarse buckets, as the reference transit relay's --blur-usage does."""
    if size == 0:
        return 0
    if size < 1_000_000:
        step = 10_000
    elif size < 1_000_000_000:
        step = 1_000_000
    else:
        step = 100_000_000
    return int(step * math.ceil(size / step))


def validate(service: str, event: str, fields: dict[str, Any]) -> None:
    schema = SCHEMAS.get((service, event))
    if schema is None:
        raise EventSchemaError(f"unknown event type {service}/{event}")
    names = {f.name for f in schema}
    extra = set(fields) - names
    missing = names - set(fields)
    if extra or missing:
        raise EventSchemaError(f"{service}/{event}: extra {sorted(extra)}, missing {sorted(missing)}")
    for f in schema:
        value = fields[f.name]
        if value is None:
            if not f.nullable:
                raise EventSchemaError(f"{service}/{event}: {f.name} may not be null")
            continue
        if isinstance(value, bool) and f.kind in ("int", "float"):
            raise EventSchemaError(f"{service}/{event}: {f.name} must be {f.kind}, not bool")
        if not isinstance(value, _PY_KINDS[f.kind]):
            raise EventSchemaError(f"{service}/{event}: {f.name} must be {f.kind}, got {type(value).__name__}")


class EventLog:
    """Appends validated event lines to a file (or nowhere when `path` is None).

    Each line is written with a single `os.write` on an O_APPEND descriptor, so lines from several
    processes never interleave. A failing disk is counted in `write_errors`, never raised into the
    server's hot path.
    """

    def __init__(self, path: str | None, service: str, node: str | None = None,
                 blur: float | None = None, clock=time.time) -> None:
        self.path = path
        self.service = service
        self.node = node or socket.gethostname()
        self.blur = blur if blur and blur > 0 else None
        self.clock = clock
        self.lines_written = 0
        self.write_errors = 0
        self._fd: int | None = None
        if path:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        """Validate and write one event; returns the record as written."""
        validate(self.service, event, fields)
        record: dict[str, Any] = {"v": SCHEMA_VERSION, "ts": self.clock(), "service": self.service,
                                  "event": event, "node": self.node}
        record.update(fields)
        if self.blur:
            for f in ENVELOPE + SCHEMAS[(self.service, event)]:
                value = record.get(f.name)
                if value is None or f.blur is None:
                    continue
                record[f.name] = blur_time(value, self.blur) if f.blur == "time" else blur_size(value)
        if self._fd is not None:
            line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
            try:
                os.write(self._fd, line)
                self.lines_written += 1
            except OSError:
                self.write_errors += 1
        return record

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
