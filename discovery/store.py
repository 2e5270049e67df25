"""Discovery state in this process's memory: entries by key, each with an expiry time.

The interface (also store_redis.py's): `get`, `put` (runs rules.check_iteration against the stored entry
and writes only when it accepts, atomically), `servers` (live server entries with connections to spare,
most first), `counts`, `close`. Times are `time.time()` seconds passed in, so tests control the clock.
"""

from __future__ import annotations

import heapq

from burrow.messaging.entry import Entry

from . import rules


class MemoryStore:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._entries: dict[bytes, tuple[Entry, float]] = {}
        self._expiry: list[tuple[float, bytes]] = []  # (expires, key); stale pairs are skipped
        self._server_keys: set[bytes] = set()

    def healthy(self) -> bool:
        return True

    def _expire(self, now: float) -> None:
        heap = self._expiry
        while heap and heap[0][0] <= now:
            expires, key = heapq.heappop(heap)
            held = self._entries.get(key)
            if held is not None and held[1] <= now:
                del self._entries[key]
                self._server_keys.discard(key)

    async def get(self, key: bytes, now: float) -> Entry | None:
        self._expire(now)
        held = self._entries.get(key)
        return held[0] if held is not None else None

    async def put(self, entry: Entry, now: float) -> rules.Verdict:
        self._expire(now)
        held = self._entries.get(entry.static)
        verdict = rules.check_iteration(held[0] if held else None, entry)
        if verdict.accepted:
            expires = now + self.ttl
            self._entries[entry.static] = (entry, expires)
            if entry.server is not None:
                self._server_keys.add(entry.static)
            else:
                self._server_keys.discard(entry.static)
            heapq.heappush(self._expiry, (expires, entry.static))
        return verdict

    async def servers(self, now: float, limit: int) -> list[Entry]:
        self._expire(now)
        found = [e for e in (self._entries[k][0] for k in self._server_keys)
                 if e.server.available_connections > 0]
        found.sort(key=lambda e: -e.server.available_connections)
        return found[:limit]

    async def counts(self, now: float) -> tuple[int, int]:
        """(live entries, live server entries)."""
        self._expire(now)
        return len(self._entries), len(self._server_keys)

    async def close(self) -> None:
        pass
