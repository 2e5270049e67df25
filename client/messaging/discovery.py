"""HTTP client of the messaging discovery: get, post and list signed entries (Skywire's API).

Every entry read back is checked against its own key's signature; one that fails is treated as absent,
so a faulty or hostile discovery cannot point us at a server the key's owner never named.
"""

from __future__ import annotations

import json
import time

import aiohttp

from burrow.messaging import keys
from burrow.messaging.entry import Entry, EntryError

PREFIX = "/messaging-discovery"


class DiscoveryError(Exception):
    """The discovery refused a request or could not be reached; `status` is the HTTP status (0 = no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"discovery: {message}" + (f" (HTTP {status})" if status else ""))
        self.status = status


class DiscoveryClient:
    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def _request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        headers = {"Content-Type": "application/json"} if body is not None else None
        try:
            async with self._session.request(method, self.url + PREFIX + path, data=body, headers=headers) as r:
                return r.status, await r.content.read(1 << 20)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise DiscoveryError(0, f"cannot reach {self.url}: {exc or type(exc).__name__}") from exc

    @staticmethod
    def _error(status: int, body: bytes) -> DiscoveryError:
        try:
            message = str(json.loads(body).get("message", ""))
        except (ValueError, AttributeError):
            message = body[:200].decode("utf-8", "replace")
        return DiscoveryError(status, message or "error")

    async def entry(self, key: bytes) -> Entry | None:
        """The live entry of `key`, or None when the discovery has none (or only a badly signed one)."""
        status, body = await self._request("GET", "/entry/" + key.hex())
        if status == 404:
            return None
        if status != 200:
            raise self._error(status, body)
        entry = _parse(body)
        return entry if entry is not None and entry.static == key else None

    async def post(self, entry: Entry) -> None:
        status, body = await self._request("POST", "/entry/", entry.to_json())
        if status != 200:
            raise self._error(status, body)

    async def available_servers(self) -> list[Entry]:
        status, body = await self._request("GET", "/available_servers")
        if status != 200:
            raise self._error(status, body)
        try:
            listed = json.loads(body)
        except ValueError as exc:
            raise DiscoveryError(status, "available_servers is not JSON") from exc
        found = []
        for obj in listed if isinstance(listed, list) else []:
            try:
                entry = Entry.from_obj(obj)
            except EntryError:
                continue
            if entry.server is not None and entry.signature_ok():
                found.append(entry)
        return found

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _parse(body: bytes) -> Entry | None:
    try:
        entry = Entry.from_obj(json.loads(body))
    except (ValueError, EntryError):
        return None
    return entry if entry.signature_ok() else None


class Publisher:
    """Keeps one key's entry current: each write is the next iteration of what the discovery holds.

    The sequence is remembered between writes; when the discovery disagrees (409: it restarted, the entry
    expired, or another process wrote it), the stored entry is read again and the write retried once.
    """

    def __init__(self, discovery: DiscoveryClient, secret: keys.SecretKey) -> None:
        self.discovery = discovery
        self.secret = secret
        self._next: int | None = None
        self._last_ts = 0

    async def publish(self, make) -> Entry:
        """`make(sequence, timestamp_ns)` builds the unsigned entry; returns what was written."""
        for attempt in range(2):
            if self._next is None or attempt:
                stored = await self.discovery.entry(self.secret.public)
                self._next = 0 if stored is None else stored.sequence + 1
                self._last_ts = stored.timestamp if stored is not None else 0
            ts = max(time.time_ns(), self._last_ts + 1)
            entry = make(self._next, ts).signed(self.secret)
            try:
                await self.discovery.post(entry)
            except DiscoveryError as exc:
                if exc.status != 409 or attempt:
                    raise
                continue
            self._next, self._last_ts = entry.sequence + 1, ts
            return entry
        raise AssertionError("unreachable")
