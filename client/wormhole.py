"""Asyncio Wormhole: the sans-IO WormholeSession (session.py) over the mailbox WebSocket (mailbox_ws.py).

Hooks for Dilation (client/dilation/ builds on these; they are a stable API):
  (a) `Wormhole(..., dilation=True)` offers Dilation (adds `can-dilate`/`dilation-abilities` to our
      `version` message), the one opt-in `w.dilate()` needs; `versions_extra={...}` merges any other
      extra keys (or a narrower `can-dilate`). `w.our_versions` is what we send; `await
      w.get_peer_versions()` returns the peer's whole version dict (also `w.peer_versions` once
      received, else None).
  (b) `w.send_phase("dilate-0", plaintext)` encrypts and sends any phase (use it for dilate-N).
  (c) `Wormhole(..., on_dilate_message=cb)` calls `cb(phase: str, plaintext: bytes)` for every
      decrypted `dilate-N` message, in N order, without gaps; without a callback they go to the
      asyncio queue `w.dilate_messages` (items `(phase, plaintext)`). Numbered phases go to
      `get_message()` only.
  (d) `w.derive_key(purpose: str, length: int) -> bytes` (after the key exists:
      `await w.get_unverified_key()` or `await w.get_verifier()` first).
  (e) `w.side` (mailbox side, 10 hex chars), `w.relay_url`, `w.transit_helper` (the
      `tcp:HOST:PORT` string given to the constructor) and `await w.close(mood=None)`.

The connection reconnects with backoff min(1.5**n, 60) + random() seconds after a loss and replays
unacknowledged state (see mailbox_protocol.py); only the FIRST connection failing is fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import sys
from collections.abc import Callable

from . import codes
from .errors import LonelyError, ServerConnectionError, WormholeError
from .mailbox_protocol import MailboxProtocolError
from .mailbox_ws import open_mailbox
from .session import (
    AppMessage,
    Closed,
    CodeReady,
    DilateMessage,
    Failed,
    KeyEstablished,
    NameplateList,
    Verified,
    WelcomeReceived,
    WormholeSession,
)
from .version import __version__

log = logging.getLogger(__name__)

APPID = "lothar.com/wormhole/text-or-file-xfer"
CONNECT_TIMEOUT = 30.0  # seconds for the first WebSocket connection
CLOSE_TIMEOUT = 10.0  # seconds to wait for the server to acknowledge close/release
MAX_MESSAGE_SIZE = 16 * 1024 * 1024  # bytes per mailbox message we accept
MAX_INBOX = 1024  # app messages buffered before get_message() is called


class Wormhole:
    def __init__(self, relay_url: str, appid: str = APPID, *, transit_helper: str | None = None,
                 app_versions: dict | None = None, versions_extra: dict | None = None,
                 on_dilate_message: Callable[[str, bytes], None] | None = None,
                 on_welcome: Callable[[dict], None] | None = None, dilation: bool = False,
                 ssl_context: ssl.SSLContext | None = None, nat=None):
        self.relay_url = relay_url
        self._ssl = ssl_context  # for a wss:// mailbox; None: the system's CAs
        self.appid = appid
        self.transit_helper = transit_helper
        self.nat = nat  # client.nat.hints.NatOptions for direct hints through NATs (None: local hints only)
        offer = {}
        if dilation:
            from .dilation.versions import versions_fields  # loads no Dilation code

            offer = versions_fields()
        versions = {**offer, **(versions_extra or {}), "app_versions": dict(app_versions or {})}
        self._s = WormholeSession(appid, versions=versions, client_version=("burrow", __version__))
        self.side = self._s.side
        self._on_dilate = on_dilate_message
        self._on_welcome = on_welcome
        self.dilate_messages: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self._inbox: asyncio.Queue[bytes] = asyncio.Queue(MAX_INBOX)
        loop = asyncio.get_running_loop()
        self._code_f: asyncio.Future[str] = loop.create_future()
        self._key_f: asyncio.Future[None] = loop.create_future()
        self._verified_f: asyncio.Future[bytes] = loop.create_future()
        self._closed_f: asyncio.Future[str] = loop.create_future()
        self._welcome_f: asyncio.Future[dict] = loop.create_future()
        self._nameplates_f: asyncio.Future[list] | None = None
        self._first_f: asyncio.Future[None] = loop.create_future()
        self._failed_f: asyncio.Future[WormholeError] = loop.create_future()
        self._ws = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False
        for f in (self._code_f, self._key_f, self._verified_f, self._welcome_f, self._first_f):
            f.add_done_callback(_consume)

    # ---- lifecycle
    async def open(self) -> None:
        """Connect to the mailbox; raise ServerConnectionError if the first connection fails."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"wormhole-{self.side}")
        await self._first_f

    async def close(self, mood: str | None = None) -> str:
        """Close the mailbox with `mood` (default: happy/lonely as appropriate); return the mood.

        Raises the session's error (WrongCodeError, ServerError, ...) if one happened, LonelyError if
        the peer never came.
        """
        self._s.close(mood)
        self._flush()
        if self._task is not None and not self._task.done():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._closed_f), CLOSE_TIMEOUT)
        await self._stop()
        if self._s.error is not None:
            raise self._s.error
        if self._s.mood == "lonely" and mood is None:
            raise LonelyError("the other side never showed up")
        return self._s.mood or "happy"

    async def _stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    # ---- code
    def allocate_code(self, length: int = codes.DEFAULT_CODE_LENGTH) -> None:
        self._s.allocate_code(length)
        self._flush()

    def set_code(self, code: str) -> None:
        self._s.set_code(code)
        self._flush()

    async def list_nameplates(self, timeout: float = 10.0) -> list[str]:
        self._nameplates_f = asyncio.get_running_loop().create_future()
        self._s.list_nameplates()
        self._flush()
        return await asyncio.wait_for(self._nameplates_f, timeout)

    async def get_code(self) -> str:
        return await self._code_f

    async def get_welcome(self) -> dict:
        return await self._welcome_f

    # ---- keys
    async def get_unverified_key(self) -> None:
        await self._key_f

    async def get_verifier(self) -> bytes:
        """Wait for the peer's version message; raises WrongCodeError on a different code."""
        return await asyncio.shield(self._verified_f)  # a caller's timeout must not cancel it for everyone

    async def get_peer_versions(self) -> dict:
        await asyncio.shield(self._verified_f)
        return dict(self._s.peer_versions or {})

    @property
    def peer_versions(self) -> dict | None:
        return self._s.peer_versions

    @property
    def our_versions(self) -> dict:
        """The `version` dict this side sends (app_versions, and can-dilate when it offers Dilation)."""
        return dict(self._s.versions)

    @property
    def code(self) -> str | None:
        return self._s.code

    def derive_key(self, purpose: str, length: int = 32) -> bytes:
        return self._s.derive_key(purpose, length)

    # ---- messages
    def send_message(self, plaintext: bytes) -> None:
        self._s.send(plaintext)
        self._flush()

    def send_phase(self, phase: str, plaintext: bytes) -> None:
        self._s.send_phase(phase, plaintext)
        self._flush()

    async def get_message(self) -> bytes:
        """Next numbered-phase message; raises the session error if the session failed first."""
        if not self._inbox.empty():
            return self._inbox.get_nowait()
        getter = asyncio.ensure_future(self._inbox.get())
        await asyncio.wait([getter, self._failed_f, self._closed_f], return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            return getter.result()
        getter.cancel()
        if self._s.error is not None:
            raise self._s.error
        raise WormholeError("the wormhole closed")

    # ---- the connection loop
    def _flush(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        attempt = 0
        while not self._stopping:
            try:
                ws = await open_mailbox(self.relay_url, ssl_context=self._ssl, max_size=MAX_MESSAGE_SIZE,
                                        timeout=CONNECT_TIMEOUT)
            except connection_errors() as e:
                if not self._first_f.done():
                    if isinstance(e, ServerConnectionError):
                        error = e
                    else:
                        error = ServerConnectionError(unreachable(self.relay_url, e))
                        error.__cause__ = e
                    self._first_f.set_exception(error)
                    self._fail_all(error)
                    return
                attempt += 1
                await self._sleep(min(1.5 ** attempt, 60.0) + random.random())
                continue
            attempt = 0
            self._ws = ws
            if not self._first_f.done():
                self._first_f.set_result(None)
            try:
                await self._serve(ws)
            except connection_errors() as e:
                log.info("mailbox connection lost: %s", e)
            except MailboxProtocolError as e:
                log.warning("mailbox protocol error, reconnecting: %s", e)
                await ws.close()
            finally:
                self._s.connection_lost()
                self._ws = None
            if self._closed_f.done():
                return
            if not self._stopping:
                await self._sleep(1.0 + random.random())

    async def _sleep(self, seconds: float) -> None:
        if not self._stopping:
            await asyncio.sleep(seconds)

    async def _serve(self, ws) -> None:
        self._s.connection_made()
        reader = asyncio.ensure_future(ws.recv())
        try:
            while True:
                await self._send_pending(ws)
                self._dispatch()
                if self._closed_f.done():
                    return
                self._wake.clear()
                waker = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait([reader, waker], return_when=asyncio.FIRST_COMPLETED)
                waker.cancel()
                if reader.done():
                    text = reader.result()
                    reader = asyncio.ensure_future(ws.recv())
                    log.debug("mailbox rx %s", text)
                    self._s.receive(text)
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader

    async def _send_pending(self, ws) -> None:
        for text in self._s.take_outgoing():
            log.debug("mailbox tx %s", text)
            await ws.send(text)

    def _dispatch(self) -> None:
        for ev in self._s.take_events():
            if isinstance(ev, WelcomeReceived):
                _set(self._welcome_f, ev.welcome)
                if self._on_welcome is not None:
                    self._on_welcome(ev.welcome)
            elif isinstance(ev, CodeReady):
                _set(self._code_f, ev.code)
            elif isinstance(ev, KeyEstablished):
                _set(self._key_f, None)
            elif isinstance(ev, Verified):
                _set(self._key_f, None)
                _set(self._verified_f, ev.verifier)
            elif isinstance(ev, AppMessage):
                self._inbox.put_nowait(ev.plaintext)
            elif isinstance(ev, DilateMessage):
                if self._on_dilate is not None:
                    self._on_dilate(ev.phase, ev.plaintext)
                else:
                    self.dilate_messages.put_nowait((ev.phase, ev.plaintext))
            elif isinstance(ev, NameplateList):
                if self._nameplates_f is not None:
                    _set(self._nameplates_f, ev.nameplates)
            elif isinstance(ev, Failed):
                self._fail_all(ev.error)
            elif isinstance(ev, Closed):
                _set(self._closed_f, ev.mood)
        if self._s.mood is not None and self._s.error is None:
            closed = WormholeError("the wormhole was closed")
            for f in (self._code_f, self._key_f, self._verified_f):
                if not f.done():
                    f.set_exception(closed)

    def _fail_all(self, error: WormholeError) -> None:
        _set(self._failed_f, error)
        for f in (self._code_f, self._key_f, self._verified_f, self._welcome_f):
            if not f.done():
                f.set_exception(error)
        if self._nameplates_f is not None and not self._nameplates_f.done():
            self._nameplates_f.set_exception(error)
        if not self._closed_f.done() and self._ws is None:
            self._closed_f.set_result("errory")

    async def dilate(self, **kwargs):
        """Dilate this wormhole (build it with `dilation=True`); returns a client.dilation.runtime.Dilation.
        See docs/dilation.md for the arguments (`timeout=` bounds the wait for the peer's versions)."""
        from .dilation.aio import dilate

        return await dilate(self, **kwargs)


def connection_errors() -> tuple[type[BaseException], ...]:
    """What a lost or refused mailbox connection raises: OSError (mailbox_ws.ConnectionClosed is one),
    TimeoutError, ServerConnectionError, and websockets' errors once a proxy made us load it."""
    ws = sys.modules.get("websockets.exceptions")
    return (OSError, TimeoutError, ServerConnectionError) + ((ws.WebSocketException,) if ws else ())


def unreachable(url: str, e: BaseException) -> str:
    """Why the first connection to the mailbox failed, in one line."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"the mailbox at {url} has a certificate that is not trusted ({e.verify_message})"
    reason = str(e).removeprefix(f"[Errno {getattr(e, 'errno', '')}] ")
    if not reason:
        reason = f"no answer within {CONNECT_TIMEOUT:g} s" if isinstance(e, TimeoutError) else type(e).__name__
    return f"cannot reach the mailbox at {url}; is it running? ({reason})"


def _set(f: asyncio.Future, value) -> None:
    if not f.done():
        f.set_result(value)


def _consume(f: asyncio.Future) -> None:
    if not f.cancelled():
        f.exception()  # mark retrieved: errors are re-raised through the API, not logged as lost
