"""Sans-IO wormhole session: code, PAKE, versions, phase encryption and ordered delivery.

in:  the mailbox texts (receive), connection_made/lost, and the API calls below.
out: take_outgoing() -> texts for the WebSocket; take_events() -> the event dataclasses below.
states: no code -> code known (PAKE sent) -> key (version sent) -> verified (peer version decrypted)
     -> closing -> closed. Any decrypt failure or bad PAKE -> scared (close mood "scary").

Peer messages other than "pake" wait until the key exists. Numbered phases "0","1",..
are delivered to the app strictly in order without gaps; "dilate-N" messages are delivered in N order
on their own stream; unknown phases are ignored (forward compatibility, as magic-wormhole does).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from . import codes, keys
from .errors import ServerError, WelcomeError, WormholeError, WrongCodeError
from .mailbox_protocol import (
    Allocated,
    MailboxClient,
    MailboxClosed,
    Nameplates,
    PeerMessage,
    ServerErrorEvent,
    Welcome,
)

_DILATE_RE = re.compile(r"dilate-([0-9]+)")
_NUMBER_RE = re.compile(r"[0-9]+")
MAX_REORDER = 1024  # out-of-order phases we buffer before calling the peer broken


@dataclass(frozen=True)
class CodeReady:
    code: str


@dataclass(frozen=True)
class KeyEstablished:
    """The PAKE finished; the key is not yet confirmed by a decrypted message."""


@dataclass(frozen=True)
class Verified:
    verifier: bytes
    versions: dict  # the peer's whole `version` dict (app_versions, can-dilate, ...)


@dataclass(frozen=True)
class AppMessage:
    index: int
    plaintext: bytes


@dataclass(frozen=True)
class DilateMessage:
    phase: str
    plaintext: bytes


@dataclass(frozen=True)
class WelcomeReceived:
    welcome: dict


@dataclass(frozen=True)
class NameplateList:
    nameplates: list


@dataclass(frozen=True)
class Failed:
    error: WormholeError


@dataclass(frozen=True)
class Closed:
    mood: str


def new_side() -> str:
    return os.urandom(5).hex()


class WormholeSession:
    def __init__(self, appid: str, *, side: str | None = None, versions: dict | None = None,
                 client_version: tuple[str, str] = ("burrow", "0.1.0")):
        self.appid = appid
        self.side = side or new_side()
        self.versions = dict(versions or {"app_versions": {}})
        self.versions.setdefault("app_versions", {})
        self.mailbox = MailboxClient(appid, self.side, client_version)
        self.code: str | None = None
        self.key: bytes | None = None
        self.peer_side: str | None = None
        self.peer_versions: dict | None = None
        self.verifier: bytes | None = None
        self.error: WormholeError | None = None
        self.mood: str | None = None
        self._code_length = codes.DEFAULT_CODE_LENGTH
        self._pake: keys.Pake | None = None
        self._events: list = []
        self._next_tx = 0
        self._queued_tx: list[tuple[str, bytes]] = []
        self._queued_rx: list[PeerMessage] = []
        self._rx_next, self._rx_buf = 0, {}
        self._dl_next, self._dl_buf = 0, {}

    # -- plumbing
    def take_outgoing(self) -> list[str]:
        return self.mailbox.take_outgoing()

    def take_events(self) -> list:
        self._pump()
        ev, self._events = self._events, []
        return ev

    def connection_made(self) -> None:
        self.mailbox.connection_made()

    def connection_lost(self) -> None:
        self.mailbox.connection_lost()

    def receive(self, text: str | bytes) -> None:
        self.mailbox.receive(text)
        self._pump()

    # -- API
    def allocate_code(self, length: int = codes.DEFAULT_CODE_LENGTH) -> None:
        if not 1 <= length <= codes.MAX_CODE_LENGTH:
            raise ValueError("code length out of range")
        self._code_length = length
        self.mailbox.allocate()

    def list_nameplates(self) -> None:
        self.mailbox.list_nameplates()

    def set_code(self, code: str) -> None:
        nameplate = codes.validate_code(code)
        self.mailbox.claim(nameplate)
        self._start_pake(code)

    def send(self, plaintext: bytes) -> str:
        phase = str(self._next_tx)
        self._next_tx += 1
        self.send_phase(phase, plaintext)
        return phase

    def send_phase(self, phase: str, plaintext: bytes) -> None:
        if self.key is None:
            self._queued_tx.append((phase, plaintext))
        else:
            self._add_encrypted(phase, plaintext)

    def derive_key(self, purpose: str, length: int = keys.KEY_SIZE) -> bytes:
        if self.key is None:
            raise WormholeError("no key yet")
        return keys.derive_key(self.key, purpose.encode("utf-8"), length)

    def close(self, mood: str | None = None) -> None:
        if self.mood is not None:
            return
        if mood is None:
            mood = "happy" if self.verifier is not None else ("lonely" if self.key is None else "happy")
        self.mood = mood
        self.mailbox.close(mood)
        self._pump()

    # -- internals
    def _fail(self, error: WormholeError, mood: str) -> None:
        if self.error is None:
            self.error = error
            self._events.append(Failed(error))
        self.close(mood)

    def _start_pake(self, code: str) -> None:
        self.code = code
        self._pake = keys.Pake(code, self.appid)
        self.mailbox.add("pake", self._pake.body())
        self._events.append(CodeReady(code))

    def _add_encrypted(self, phase: str, plaintext: bytes) -> None:
        assert self.key is not None
        body = keys.encrypt_data(keys.derive_phase_key(self.key, self.side, phase), plaintext)
        self.mailbox.add(phase, body)

    def _pump(self) -> None:
        for ev in self.mailbox.take_events():
            self._handle(ev)

    def _handle(self, ev) -> None:
        if isinstance(ev, Welcome):
            self._events.append(WelcomeReceived(ev.welcome))
            if "error" in ev.welcome:
                self._fail(WelcomeError(str(ev.welcome["error"])), "unwelcome")
        elif isinstance(ev, Allocated):
            if self.code is None:
                self._start_pake(codes.make_code(ev.nameplate, self._code_length))
        elif isinstance(ev, Nameplates):
            self._events.append(NameplateList(ev.nameplates))
        elif isinstance(ev, ServerErrorEvent):
            self._fail(ServerError(ev.error), "errory")
        elif isinstance(ev, MailboxClosed):
            self._events.append(Closed(ev.mood))
        elif isinstance(ev, PeerMessage):
            if self.mood is not None:
                return  # closing: late messages are irrelevant
            if ev.phase == "pake":
                self._got_pake(ev)
            elif self.key is None:
                self._queued_rx.append(ev)
            else:
                self._got_encrypted(ev)

    def _got_pake(self, ev: PeerMessage) -> None:
        if self.key is not None or self._pake is None:
            if self._pake is None:
                self._queued_rx.insert(0, ev)  # the code is not known yet
            return
        try:
            self.key = self._pake.finish(ev.body)
        except WrongCodeError as e:
            self._fail(e, "scary")
            return
        self.peer_side = ev.side
        self._events.append(KeyEstablished())
        self._add_encrypted("version", json.dumps(self.versions).encode("utf-8"))
        for phase, plaintext in self._queued_tx:
            self._add_encrypted(phase, plaintext)
        self._queued_tx.clear()
        queued, self._queued_rx = self._queued_rx, []
        for q in queued:
            self._handle(q)

    def _got_encrypted(self, ev: PeerMessage) -> None:
        if ev.side != self.peer_side:
            return  # a third party in our mailbox; the PAKE peer is the only one we talk to
        assert self.key is not None
        try:
            plaintext = keys.decrypt_data(keys.derive_phase_key(self.key, ev.side, ev.phase), ev.body)
        except WrongCodeError as e:
            self._fail(e, "scary")
            return
        if ev.phase == "version":
            try:
                versions = json.loads(plaintext)
                if not isinstance(versions, dict):
                    raise ValueError("not an object")
            except ValueError:
                versions = {}
            self.peer_versions = versions
            self.verifier = keys.derive_verifier(self.key)
            self._events.append(Verified(self.verifier, versions))
            return
        m = _DILATE_RE.fullmatch(ev.phase)
        if m:
            self._deliver_ordered(int(m.group(1)), ev.phase, plaintext, dilate=True)
        elif _NUMBER_RE.fullmatch(ev.phase):
            self._deliver_ordered(int(ev.phase), ev.phase, plaintext, dilate=False)

    def _deliver_ordered(self, n: int, phase: str, plaintext: bytes, dilate: bool) -> None:
        buf = self._dl_buf if dilate else self._rx_buf
        nxt = self._dl_next if dilate else self._rx_next
        if n < nxt:
            return
        if len(buf) >= MAX_REORDER:
            self._fail(WormholeError("peer sent too many out-of-order messages"), "errory")
            return
        buf[n] = (phase, plaintext)
        while nxt in buf:
            ph, pt = buf.pop(nxt)
            self._events.append(DilateMessage(ph, pt) if dilate else AppMessage(nxt, pt))
            nxt += 1
        if dilate:
            self._dl_next = nxt
        else:
            self._rx_next = nxt
