"""The seams between the transit relay's modules, declared as typing.Protocols.

A connection or a pump never sees the whole server: it is given the few calls it uses, named here.
The server (and, in a cluster, the hop code) implements them. This module imports only the sans-IO
core and the configuration, so nothing that imports it can form a cycle through it.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from burrow.transit_relay.config import TransitConfig
from burrow.transit_relay.protocol import Conn, PairState, Relay


class RelayHost(Protocol):
    """What an endpoint or a pump needs from the server that accepted it."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def relay(self) -> Relay: ...  # the sans-IO pairing core
    @property
    def config(self) -> TransitConfig: ...

    def clock(self) -> float:
        """Seconds since the epoch, as the core expects `now`."""

    def dispatch(self, actions: list) -> None:
        """Carry out the core's actions (Pair, Close, Record...)."""

    def pair_done(self, pair: PairState, holder: object) -> None:
        """Both connections of `pair` are closed; `holder` (its pump) is finished."""


class ByteCounts(Protocol):
    """Where a pump adds the bytes it moved: a PairState, or a hop's own counters."""

    bytes_from_first: int
    bytes_from_second: int


class Endpoint(Protocol):
    """One client connection as the server drives it (`Conn.handle`): TCP or WebSocket."""

    transport: str  # "tcp" or "websocket": the kind of socket this endpoint reads
    conn: Conn

    def close(self, reply: bytes | None = None) -> None:
        """Send `reply` if not paired yet, then close (a paired endpoint ends its pair)."""

    def take_over(self) -> None:
        """Paired: stop reading the handshake and send `ok`."""

    async def write(self, data: bytes) -> None:
        """Send relayed bytes, waiting while the client cannot take more."""

    def shut(self) -> None:
        """Wake pending reads and writes so the pump ends."""


class TcpSide(Endpoint, Protocol):
    """A TCP endpoint paired with a WebSocket: the pair's task pumps its socket (websocket.StreamPair)."""

    async def pump_to(self, partner: Endpoint, counts: ByteCounts, first: bool) -> None:
        """Read the socket and write to `partner` until EOF, counting into `counts`."""

    def close_socket(self) -> None:
        """Close the socket once both directions have ended."""


class Stream(Protocol):
    """The pump a paired WebSocket endpoint hands its messages to (websocket.StreamPair)."""

    async def forward(self, ep: Endpoint, msg: bytes) -> None:
        """Relay one message from `ep` to its partner."""

    def direction_ended(self) -> None:
        """One direction ended (WebSocket has no half-close: both close)."""

    def part_done(self) -> None:
        """One side's reader finished; the last call ends the pair."""

    def abort(self) -> None:
        """End both directions now."""
