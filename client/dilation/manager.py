"""L1: Dilation negotiation over the mailbox (`dilate-N` phases) and connection generations.

in:  start(peer_versions), receive(message dict) for each in-order `dilate-N` plaintext, connection_made(),
     connection_lost(), peer_stopped(), stop()
out: actions: Send(phase, message), StartConnecting(generation), StopConnecting, UseHints(hints),
     Abandon (drop the live connection), Status(name), Failed(reason)
states: WAITING -> WANTING (sent please) -> CONNECTING -> CONNECTED; Leader: CONNECTED -> FLUSHING (sent
     reconnect) -> CONNECTING on `reconnecting`; Follower: CONNECTED -> LONELY (lost it) or ABANDONING (Leader
     said reconnect) -> CONNECTING after sending `reconnecting`; STOPPED is terminal.

`N` in `dilate-N` counts every dilation message this side sends, from 0 (magic-wormhole 0.24). The higher
dilation side (16 hex digits, independent of the mailbox side) is the Leader. A generation is one Connector
run; StopConnecting always precedes the next StartConnecting, so generations never overlap.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .versions import ABILITIES, SIMOPEN, SUPPORTED_VERSIONS, versions_fields  # noqa: F401 - part of L1's surface


@dataclass(frozen=True)
class Send:
    phase: str
    message: dict


@dataclass(frozen=True)
class StartConnecting:
    generation: int


@dataclass(frozen=True)
class StopConnecting:
    generation: int


@dataclass(frozen=True)
class UseHints:
    generation: int
    hints: list = field(default_factory=list)


@dataclass(frozen=True)
class LateHints:
    """Hints that arrived after this generation connected: no dial, but the Leader's upgrade probes use them."""
    generation: int
    hints: list = field(default_factory=list)


@dataclass(frozen=True)
class Abandon:
    pass


@dataclass(frozen=True)
class Status:
    name: str  # "wanting", "connecting", "connected", "reconnecting", "stopped"


@dataclass(frozen=True)
class Failed:
    reason: str


Action = Send | StartConnecting | StopConnecting | UseHints | Abandon | Status | Failed


def choose_version(ours: tuple[str, ...], theirs: list) -> str | None:
    """The best shared version is the earliest in our own list."""
    for v in ours:
        if v in theirs:
            return v
    return None


class Manager:
    def __init__(self, *, side: str | None = None, versions: tuple[str, ...] = SUPPORTED_VERSIONS):
        self.side = side or os.urandom(8).hex()
        self.versions = versions
        self.state = "WAITING"
        self.version: str | None = None
        self.leader: bool | None = None
        self.generation = 0  # Connector runs started so far
        self._next_phase = 0
        self._early: list[dict] = []
        self.peer_simopen = False  # the peer listed tcp-simultaneous-open-v1 in its dilation-abilities

    # -- helpers
    def _send(self, **msg) -> Send:
        phase = f"dilate-{self._next_phase}"
        self._next_phase += 1
        return Send(phase, msg)

    def _start_connecting(self) -> list[Action]:
        self.generation += 1
        return [StartConnecting(self.generation)]

    # -- inputs
    def start(self, peer_versions: dict) -> list[Action]:
        if self.state != "WAITING":
            return []
        abilities = peer_versions.get("dilation-abilities")
        self.peer_simopen = isinstance(abilities, list) and SIMOPEN in abilities
        theirs = peer_versions.get("can-dilate", [])
        self.version = choose_version(self.versions, theirs if isinstance(theirs, list) else [])
        if self.version is None:
            self.state = "STOPPED"
            return [Failed(f"peer cannot dilate: no shared version in {theirs!r}")]
        self.state = "WANTING"
        out: list[Action] = [self._send(type="please", side=self.side, **{"use-version": self.version}),
                             Status("wanting")]
        early, self._early = self._early, []
        for m in early:
            out += self.receive(m)
        return out

    def receive(self, msg: dict) -> list[Action]:
        kind = msg.get("type") if isinstance(msg, dict) else None
        if self.state == "WAITING":
            self._early.append(msg)
            return []
        if kind == "please":
            return self._rx_please(msg)
        if kind == "connection-hints":
            hints = msg.get("hints")
            if self.state == "CONNECTING" and isinstance(hints, list):
                return [UseHints(self.generation, hints)]
            if self.state == "CONNECTED" and isinstance(hints, list):
                return [LateHints(self.generation, hints)]
            return []  # too early, too late or stale: ignored as magic-wormhole does
        if kind == "reconnect":
            return self._rx_reconnect()
        if kind == "reconnecting":
            return self._rx_reconnecting()
        return []

    def _rx_please(self, msg: dict) -> list[Action]:
        if self.state != "WANTING":
            return []
        their_side = msg.get("side")
        if not isinstance(their_side, str) or their_side == self.side:
            self.state = "STOPPED"
            return [Failed(f"bad peer dilation side {their_side!r}")]
        self.leader = self.side > their_side
        # Both sides use the version the Leader picked (a Follower adopts it when it supports it).
        theirs = msg.get("use-version")
        if not self.leader and theirs in self.versions:
            self.version = theirs
        self.state = "CONNECTING"
        return self._start_connecting() + [Status("connecting")]

    def _rx_reconnect(self) -> list[Action]:
        if self.leader is not False:
            return []
        if self.state == "LONELY":
            self.state = "CONNECTING"
            return [self._send(type="reconnecting"), *self._start_connecting(), Status("reconnecting")]
        if self.state == "CONNECTED":
            self.state = "ABANDONING"
            return [Abandon()]
        if self.state == "CONNECTING":
            return [StopConnecting(self.generation), self._send(type="reconnecting"),
                    *self._start_connecting(), Status("reconnecting")]
        return []

    def _rx_reconnecting(self) -> list[Action]:
        if self.leader is not True or self.state != "FLUSHING":
            return []
        self.state = "CONNECTING"
        return [*self._start_connecting(), Status("reconnecting")]

    def connection_made(self) -> list[Action]:
        if self.state != "CONNECTING":
            return []
        self.state = "CONNECTED"
        return [StopConnecting(self.generation)]  # the adapter reports "connected" with the path

    def connection_lost(self) -> list[Action]:
        if self.state == "STOPPING":
            self.state = "STOPPED"
            return [Status("stopped")]
        if self.state == "CONNECTED" and self.leader:
            self.state = "FLUSHING"
            return [self._send(type="reconnect"), Status("reconnecting")]
        if self.state == "CONNECTED":
            self.state = "LONELY"
            return [Status("reconnecting")]
        if self.state == "ABANDONING":
            self.state = "CONNECTING"
            return [self._send(type="reconnecting"), *self._start_connecting(), Status("reconnecting")]
        return []

    def leader_gave_up_connecting(self) -> list[Action]:
        """Leader: the current generation found no connection in time; start a fresh one."""
        if self.leader and self.state == "CONNECTING":
            self.state = "FLUSHING"
            return [StopConnecting(self.generation), self._send(type="reconnect"), Status("reconnecting")]
        return []

    def peer_stopped(self) -> list[Action]:
        """The peer said it stopped for good (a STOP record): stop too, without trying to reconnect."""
        if self.state in ("STOPPED", "STOPPING"):
            return []
        out: list[Action] = [StopConnecting(self.generation)] if self.state == "CONNECTING" else []
        if self.state in ("CONNECTED", "ABANDONING"):
            out.append(Abandon())
        self.state = "STOPPED"
        return out + [Status("stopped")]

    def stop(self) -> list[Action]:
        if self.state in ("STOPPED", "STOPPING"):
            return []
        if self.state in ("CONNECTED", "ABANDONING"):
            self.state = "STOPPING"
            return [Abandon()]
        out: list[Action] = [StopConnecting(self.generation)] if self.state == "CONNECTING" else []
        self.state = "STOPPED"
        return out + [Status("stopped")]
