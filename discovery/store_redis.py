"""Discovery state in Redis, shared by every replica (same interface as store.MemoryStore).

Keys (common/redis.py's naming; one entry per key, so a cluster spreads them):

  burrow:discovery:{<pk hex>}:entry   hash: entry (JSON as signed), next (sequence + 1), ts (sortable
                                      timestamp); expires after the entry TTL (PEXPIRE)
  burrow:discovery:{servers}          sorted set: server keys scored by expiry time (ms)
  burrow:discovery:{entries}          sorted set: every key scored by expiry time (ms), for counting

A write runs one Lua script on the entry's key: it checks the posted sequence against the stored `next`
and the posted timestamp against the stored one, and writes only if both pass, so two replicas can never
accept the same sequence. Numbers cross into Lua as strings (Lua's doubles cannot hold 64-bit sequences
or nanosecond timestamps): `next` is computed in Python, timestamps are offset by 2**63 and zero-padded
to 20 digits so that comparing strings compares numbers. The two sorted sets are indexes, written after
the entry; readers check each listed entry, so an index that lags never shows a dead entry.
"""

from __future__ import annotations

import json
import logging

from burrow.common.redis import RedisLink, RedisMetrics, key
from burrow.messaging.entry import Entry, EntryError

from . import rules

log = logging.getLogger(__name__)
SERVICE = "discovery"
SERVERS = key(SERVICE, "servers")
ENTRIES = key(SERVICE, "entries")
SCAN_LIMIT = 1000  # server keys read per available_servers answer

# KEYS[1] entry key. ARGV: sequence, next, ts (sortable), entry JSON, ttl ms.
_PUT = """
local stored_next = redis.call('HGET', KEYS[1], 'next')
if not stored_next then
  if ARGV[1] ~= '0' then return 'new_nonzero' end
else
  if ARGV[1] ~= stored_next then return 'sequence:' .. stored_next end
  if ARGV[3] <= redis.call('HGET', KEYS[1], 'ts') then return 'timestamp' end
end
redis.call('HSET', KEYS[1], 'next', ARGV[2], 'ts', ARGV[3], 'entry', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
if stored_next then return 'iteration' end
return 'new'
"""


def entry_key(static_hex: str) -> str:
    return key(SERVICE, static_hex, "entry")


def sortable_ts(timestamp: int) -> str:
    return f"{timestamp + (1 << 63):020d}"


class RedisStore:
    """`registry`: the service's Prometheus registry, for common/redis.py's round-trip and health series."""

    def __init__(self, url: str, ttl: float, registry=None) -> None:
        self.ttl = ttl
        self.link = RedisLink(url, RedisMetrics(registry, SERVICE) if registry is not None else None)
        self._put = None

    async def start(self) -> None:
        await self.link.start()
        self._put = self.link.client.register_script(_PUT)

    def healthy(self) -> bool:
        return self.link.healthy

    async def get(self, static: bytes, now: float) -> Entry | None:
        return _parse(await self.link.timed(self.link.client.hget(entry_key(static.hex()), "entry")))

    async def put(self, entry: Entry, now: float) -> rules.Verdict:
        ttl_ms = int(self.ttl * 1000)
        member = entry.static.hex()
        answer = await self.link.timed(self._put(
            keys=[entry_key(member)],
            args=[str(entry.sequence), str(entry.sequence + 1), sortable_ts(entry.timestamp), entry.to_json(),
                  ttl_ms]))
        answer = answer.decode() if isinstance(answer, bytes) else str(answer)
        if answer not in ("new", "iteration"):
            return _refusal(answer, entry)
        expires = int(now * 1000) + ttl_ms
        client = self.link.client
        await self.link.timed(client.zadd(ENTRIES, {member: expires}))
        if entry.server is not None:
            await self.link.timed(client.zadd(SERVERS, {member: expires}))
        else:
            await self.link.timed(client.zrem(SERVERS, member))
        return rules.WROTE_NEW if answer == "new" else rules.WROTE_ITERATION

    async def servers(self, now: float, limit: int) -> list[Entry]:
        now_ms = int(now * 1000)
        client = self.link.client
        await self.link.timed(client.zremrangebyscore(SERVERS, "-inf", now_ms))
        members = await self.link.timed(client.zrangebyscore(SERVERS, now_ms, "+inf", start=0, num=SCAN_LIMIT))
        raws = []
        if members:
            pipe = client.pipeline(transaction=False)
            for member in members:
                pipe.hget(entry_key(member.decode() if isinstance(member, bytes) else member), "entry")
            raws = await self.link.timed(pipe.execute())
        found = [e for e in map(_parse, raws)
                 if e is not None and e.server is not None and e.server.available_connections > 0]
        found.sort(key=lambda e: -e.server.available_connections)
        return found[:limit]

    async def counts(self, now: float) -> tuple[int, int]:
        now_ms = int(now * 1000)
        client = self.link.client
        await self.link.timed(client.zremrangebyscore(ENTRIES, "-inf", now_ms))
        await self.link.timed(client.zremrangebyscore(SERVERS, "-inf", now_ms))
        return (await self.link.timed(client.zcard(ENTRIES)), await self.link.timed(client.zcard(SERVERS)))

    async def close(self) -> None:
        await self.link.close()


def _parse(raw) -> Entry | None:
    if raw is None:
        return None
    try:
        return Entry.from_obj(json.loads(raw))
    except (ValueError, EntryError):
        log.warning("unreadable entry in Redis; ignored")
        return None


def _refusal(answer: str, entry: Entry) -> rules.Verdict:
    if answer == "new_nonzero":
        return rules.check_iteration(None, entry)
    if answer == "timestamp":
        return rules.refused(409, "entry validation error: previous entry timestamp is not set before current "
                                  "entry timestamp", "timestamp")
    stored = int(answer.partition(":")[2]) - 1
    return rules.refused(409, "entry validation error: sequence field of new entry is not sequence of old "
                              f"entry + 1 (stored {stored})", "sequence")
