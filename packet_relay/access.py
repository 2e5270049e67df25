"""Who may use the relay; both checks are off by default and run in this order when on.

- Allow-list file: one public key per line (64 hex digits, optionally prefixed `nodekey:`), `#`
  comments. Re-read on SIGHUP; connected clients whose key left the list are closed as `denied`.
  A file that cannot be read on reload keeps the previous list (and logs why).
- HTTP callout: POST `{"NodePublic": "nodekey:<hex>", "Source": "<client ip>"}` (derper's
  --verify-client-url body) to the URL; only HTTP 200 with `{"allow": true}` (or derper's
  `"Allow"`) admits. Errors, timeouts and anything else deny: the callout fails closed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import aiohttp

log = logging.getLogger(__name__)
MAX_CALLOUT_BODY = 4096


class AllowListError(ValueError):
    pass


def parse_key(text: str) -> bytes:
    text = text.strip()
    for prefix in ("nodekey:", "mkey:", "endpoint:"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    try:
        raw = bytes.fromhex(text)
    except ValueError as exc:
        raise AllowListError(f"not a hex key: {text[:20]!r}") from exc
    if len(raw) != 32:
        raise AllowListError(f"key must be 32 bytes, got {len(raw)}")
    return raw


def load_allow_list(path: str) -> frozenset[bytes]:
    keys = set()
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            keys.add(parse_key(line))
        except AllowListError as exc:
            raise AllowListError(f"{path}:{n}: {exc}") from None
    return frozenset(keys)


class AccessControl:
    def __init__(self, allow_list_path: str | None = None, callout_url: str | None = None,
                 callout_timeout: float = 5.0) -> None:
        self.allow_list_path = allow_list_path
        self.callout_url = callout_url
        self.callout_timeout = callout_timeout
        self.allowed: frozenset[bytes] | None = None
        self._session: aiohttp.ClientSession | None = None
        if allow_list_path:
            self.allowed = load_allow_list(allow_list_path)

    @property
    def enabled(self) -> bool:
        return self.allowed is not None or bool(self.callout_url)

    def reload(self) -> bool:
        """Re-read the allow-list; returns False (keeping the old list) when it cannot."""
        if not self.allow_list_path:
            return True
        try:
            self.allowed = load_allow_list(self.allow_list_path)
        except (OSError, AllowListError) as exc:
            log.error("allow-list reload failed, keeping %d keys: %s", len(self.allowed or ()), exc)
            return False
        log.info("allow-list reloaded: %d keys", len(self.allowed))
        return True

    def listed(self, key: bytes) -> bool:
        return self.allowed is None or key in self.allowed

    async def check(self, key: bytes, source_ip: str) -> str | None:
        """None when admitted, else the source of the refusal: `allow_list` or `callout`."""
        if not self.listed(key):
            return "allow_list"
        if self.callout_url and not await self._callout(key, source_ip):
            return "callout"
        return None

    async def _callout(self, key: bytes, source_ip: str) -> bool:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.callout_timeout))
        body = {"NodePublic": "nodekey:" + key.hex(), "Source": source_ip}
        try:
            async with self._session.post(self.callout_url, json=body) as resp:
                if resp.status != 200:
                    return False
                raw = await resp.content.read(MAX_CALLOUT_BODY)
            answer = json.loads(raw)
        except (TimeoutError, aiohttp.ClientError, ValueError, OSError) as exc:
            log.warning("access callout failed, denying: %s", exc)
            return False
        if not isinstance(answer, dict):
            return False
        return answer.get("allow") is True or answer.get("Allow") is True

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
