"""The three endpoints of Skywire's discovery as HTTP JSON (aiohttp handlers over a store).

  GET  /messaging-discovery/entry/{public_key}    200 entry | 400 bad key | 404 {"message","code"}
  POST /messaging-discovery/entry/                200 {"message","code"} | 400 | 401 | 409 | 413
  GET  /messaging-discovery/available_servers     200 [entry, ...] (most available connections first)

Entries go out exactly as their owners signed them (Entry.to_json), so any client can check them.
"""

from __future__ import annotations

import logging
import time

from aiohttp import web

from burrow.common.redis import UNAVAILABLE
from burrow.messaging import keys
from burrow.messaging.errors import KeyFormatError

from . import rules

log = logging.getLogger(__name__)
PREFIX = "/messaging-discovery"
JSON = "application/json"


class DiscoveryAPI:
    def __init__(self, store, stats, config, clock=time.time) -> None:
        self.store = store
        self.stats = stats
        self.config = config
        self.clock = clock

    def routes(self, app: web.Application) -> None:
        app.router.add_get(PREFIX + "/entry/{key}", self.get_entry)
        app.router.add_post(PREFIX + "/entry/", self.post_entry)
        app.router.add_post(PREFIX + "/entry", self.post_entry)
        app.router.add_get(PREFIX + "/available_servers", self.available_servers)

    def _reply(self, verdict: rules.Verdict) -> web.Response:
        if not verdict.accepted and verdict.status != 404:
            self.stats.refused[verdict.reason] += 1
        return web.Response(body=verdict.body(), status=verdict.status, content_type=JSON)

    async def get_entry(self, request: web.Request) -> web.Response:
        self.stats.requests["get_entry"] += 1
        try:
            key = keys.parse_public_key(request.match_info["key"])
        except KeyFormatError as exc:
            return self._reply(rules.refused(400, f"error bad input: {exc}", "bad_key"))
        entry = await self._store_call(self.store.get(key, self.clock()))
        if isinstance(entry, web.Response):
            return entry
        if entry is None:
            return self._reply(rules.NOT_FOUND)
        return web.Response(body=entry.to_json(), content_type=JSON)

    async def post_entry(self, request: web.Request) -> web.Response:
        self.stats.requests["post_entry"] += 1
        limit = self.config.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._reply(rules.refused(413, f"error bad input: body over {limit} bytes", "too_large"))
        body = await request.content.read(limit + 1)
        if len(body) > limit:
            return self._reply(rules.refused(413, f"error bad input: body over {limit} bytes", "too_large"))
        entry = rules.parse(body)
        if isinstance(entry, rules.Verdict):
            return self._reply(entry)
        now = self.clock()
        problem = rules.check_alone(entry, int(now * 1e9), self.config.entry_ttl, self.config.max_clock_skew)
        if problem is not None:
            return self._reply(problem)
        verdict = await self._store_call(self.store.put(entry, now))
        if isinstance(verdict, web.Response):
            return verdict
        if verdict.accepted:
            self.stats.writes[verdict.reason] += 1
        return self._reply(verdict)

    async def available_servers(self, request: web.Request) -> web.Response:
        self.stats.requests["available_servers"] += 1
        found = await self._store_call(self.store.servers(self.clock(), self.config.max_servers_listed))
        if isinstance(found, web.Response):
            return found
        return web.Response(body=b"[" + b",".join(e.to_json() for e in found) + b"]", content_type=JSON)

    async def _store_call(self, awaitable):
        """The store's answer, or a 503 reply when the store (Redis) fails."""
        try:
            return await awaitable
        except UNAVAILABLE as exc:
            self.stats.store_errors += 1
            log.warning("store failed: %s", exc)
            return self._reply(rules.refused(503, "store unavailable, try again", "store"))
