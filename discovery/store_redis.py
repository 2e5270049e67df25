"""Discovery state in Redis, shared by every replica (same interface as store.MemoryStore).

Keys (one entry per key, so a cluster spreads them; `{...}` hash tags keep each key's own slot):

  burrow:discovery:entry:{<pk hex>}   hash: entry (JSON as signed), next (sequence + 1), ts (sortable
                                      timestamp), expires after the entry TTL (PEXPIRE)
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

from burrow.messaging.entry import Entry, EntryError

from . import rules

log = logging.getLogger(__name__)
PREFIX = "burrow:discovery:"
SERVERS = PREFIX + "{servers}"
ENTRIES = PREFIX + "{entries}"
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


def entry_key(static: bytes) -> str:
    return f"{PREFIX}entry:{{{static.hex()}}}"


def sortable_ts(timestamp: int) -> str:
    return f"{timestamp + (1 << 63):020d}"


class RedisStore:
    def __init__(self, url: str, ttl: float, client=None) -> None:
        self.url = url
        self.ttl = ttl
        self.redis = client
        self._put = None
        self._healthy = False

    async def start(self) -> None:
        if self.redis is None:
            from burrow.common.redis import connect

            self.redis = await connect(self.url)
        self._put = self.redis.register_script(_PUT)
        await self.redis.ping()
        self._healthy = True

    def healthy(self) -> bool:
        checker = getattr(self.redis, "healthy", None)
        return checker() if callable(checker) else self._healthy

    async def get(self, key: bytes, now: float) -> Entry | None:
        raw = await self.redis.hget(entry_key(key), "entry")
        return _parse(raw)

    async def put(self, entry: Entry, now: float) -> rules.Verdict:
        ttl_ms = int(self.ttl * 1000)
        key = entry_key(entry.static)
        answer = await self._put(keys=[key], args=[str(entry.sequence), str(entry.sequence + 1),
                                                   sortable_ts(entry.timestamp), entry.to_json(), ttl_ms])
        answer = answer.decode() if isinstance(answer, bytes) else str(answer)
        if answer not in ("new", "iteration"):
            return _refusal(answer, entry)
        expires = int(now * 1000) + ttl_ms
        member = entry.static.hex()
        await self.redis.zadd(ENTRIES, {member: expires})
        if entry.server is not None:
            await self.redis.zadd(SERVERS, {member: expires})
        else:
            await self.redis.zrem(SERVERS, member)
        return rules.WROTE_NEW if answer == "new" else rules.WROTE_ITERATION

    async def servers(self, now: float, limit: int) -> list[Entry]:
        now_ms = int(now * 1000)
        await self.redis.zremrangebyscore(SERVERS, "-inf", now_ms)
        members = await self.redis.zrangebyscore(SERVERS, now_ms, "+inf", start=0, num=SCAN_LIMIT)
        async with self.redis.pipeline(transaction=False) as pipe:
            for member in members:
                member = member.decode() if isinstance(member, bytes) else member
                pipe.hget(f"{PREFIX}entry:{{{member}}}", "entry")
            raws = await pipe.execute() if members else []
        found = []
        for raw in raws:
            entry = _parse(raw)
            if entry is not None and entry.server is not None and entry.server.available_connections > 0:
                found.append(entry)
        found.sort(key=lambda e: -e.server.available_connections)
        return found[:limit]

    async def counts(self, now: float) -> tuple[int, int]:
        now_ms = int(now * 1000)
        await self.redis.zremrangebyscore(ENTRIES, "-inf", now_ms)
        await self.redis.zremrangebyscore(SERVERS, "-inf", now_ms)
        return await self.redis.zcard(ENTRIES), await self.redis.zcard(SERVERS)

    async def close(self) -> None:
        if self.redis is not None:
            closer = getattr(self.redis, "aclose", None) or self.redis.close
            await closer()


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
