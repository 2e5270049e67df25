"""Dilation's generations in the asyncio runtime: each one's Connector, its timeout, and what outlives it.

in:  the Manager's StartConnecting / StopConnecting (via runtime.Dilation._run), the peer's hints
out: one transport.Connector racing per generation; a relay-won generation kept searching behind the relay
     (`_probed`, upgrade.py), or a Follower's listeners kept for the Leader's upgrade probes; our Disco
     endpoint (UDP punching), started once and shared by every generation
states: no generation | one connecting (`_connector`) | connected, maybe one still probed (`_probed`)

`Generations` is a part of runtime.Dilation, kept here so each file holds one concern: it uses the
runtime's Manager, options and timers, and calls its `_ensure_role`, `_run` and `_spawn`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from burrow.client.dilation import upgrade
from burrow.client.dilation.connection import RecordCodec
from burrow.client.dilation.disco_link import DiscoLink
from burrow.client.dilation.disco_link import parse_hint as parse_disco_hint
from burrow.client.dilation.l2protocol import L2Protocol
from burrow.client.dilation.manager import Manager
from burrow.client.dilation.transport import Connector

log = logging.getLogger(__name__)

DISCO_START_TIMEOUT = 10.0  # seconds to reach the DERP relay (and STUN) before going without UDP punching


class Generations:
    """Starts and stops each generation's Connector; keeps the Disco endpoint and the peer's Disco hint."""

    # the runtime's, set in Dilation.__init__
    manager: Manager
    connection: L2Protocol | None  # the selected connection
    _connector: Connector | None  # the generation racing now
    _probed: Connector | None  # connected, still listening for upgrade probes or searching behind the relay
    _gen_timer: asyncio.TimerHandle | None
    _loop: asyncio.AbstractEventLoop
    _disco: asyncio.Task | None
    _peer_disco: tuple | None
    _first_connection: asyncio.Future
    _on_status: Callable | None
    _no_path_said: tuple | None = None  # (generation, hints) of the last no-path event

    def _start_generation(self, generation: int) -> None:
        self._ensure_role()
        carried = self._probed.hand_over() if self._probed is not None and self._probed.searching else []
        self._stop_generation()
        version = self.manager.version or "ged"
        c = Connector(self, generation, leader=self.manager.leader, side=self.manager.side, key=self._key,
                      codec_factory=lambda: RecordCodec(version), relay=self._relay, listen=self._listen,
                      listen_addresses=self._listen_addresses, relay_delay=self._relay_delay,
                      max_frame=self._max_frame, nat=self._nat, simopen=self.manager.peer_simopen,
                      prefer_quic=self._prefer_quic, relay_first=self._relay_first)
        c.keep_listening = self._peer_upgrades and not self.manager.leader
        c.adopt(carried)
        self._connector = c
        self._spawn(c.start())
        if self.manager.leader:
            self._gen_timer = self._loop.call_later(self._generation_timeout, self._generation_expired, c)

    def no_path_left(self, c: Connector) -> None:
        """Before the first connection: tell on_status each time the racing generation has nothing of its own
        left (a "no-path" event; an app may give up once the peer reports the same, see DilationStatus.hints)."""
        if c is not self._connector or self._first_connection.done() or self._on_status is None:
            return
        hints = (c.hints_sent, c.hints_seen)
        if (c.generation, hints) == self._no_path_said:
            return
        self._no_path_said = (c.generation, hints)
        from burrow.client.dilation.runtime import DilationStatus  # (runtime.py imports this module)

        tried = ", ".join(c.failures) or "no path"
        self._on_status(DilationStatus("no-path", c.generation, reason=tried, hints=hints))

    def direct_found(self, c: Connector, p: L2Protocol) -> None:
        upgrade.take_direct(self, c, p)

    def _generation_expired(self, c: Connector) -> None:
        if self._connector is c and c.winner is None:
            self._run(self.manager.leader_gave_up_connecting())

    def _stop_generation(self, connected: bool = False) -> None:
        """`connected`: the generation's connection was just selected; a Follower then keeps its listeners
        until the next generation when the peer takes upgrades (the Leader's probes connect there)."""
        if self._gen_timer is not None:
            self._gen_timer.cancel()
            self._gen_timer = None
        if self._probed is not None:
            self._probed.stop(keep=self._probed.winner)
            self._probed.close_listeners()
            self._probed = None
        c, self._connector = self._connector, None
        if c is not None and connected and c.searching and c.winner is self.connection:
            self._probed = c
            window = upgrade.SEARCH_BEHIND + (0.0 if self.manager.leader else upgrade.FOLLOWER_SEARCH_MARGIN)
            self._loop.call_later(window, upgrade.end_search, self, c)
        elif c is not None:
            c.stop(keep=c.winner)
            if connected and c.keep_listening and c.winner is not None and c.winner is self.connection:
                self._probed = c
            else:
                c.close_listeners()

    async def disco_link(self) -> DiscoLink | None:
        """Our Disco endpoint when the options name a DERP relay (started at the first call), else None."""
        url = getattr(self._nat, "derp_url", None)
        if not url:
            return None
        if self._disco is None:
            self._disco = self._loop.create_task(self._start_disco())
        try:
            return await asyncio.shield(self._disco)
        except Exception as e:
            log.info("dilation: no UDP punching through %s: %r", url, e)
            return None

    async def _start_disco(self) -> DiscoLink:
        link = DiscoLink(self._nat)
        async with asyncio.timeout(DISCO_START_TIMEOUT):
            await link.start()
        return link

    def _note_peer_disco(self, hints: list) -> None:
        """Keep the peer's latest derp-disco-v1 hint: the Leader's QUIC rate probes use it after the win."""
        for h in hints:
            parsed = parse_disco_hint(h)
            if parsed is not None:
                self._peer_disco = parsed
                self.know_peer_disco()

    def know_peer_disco(self) -> None:
        """Once both our Disco endpoint and the peer's hint exist: our endpoint answers the peer's Disco (it
        drops packets from keys it was not given), also when the hint came after the generation's win."""
        t, hint = self._disco, self._peer_disco
        if hint is not None and t is not None and t.done() and not t.cancelled() and t.exception() is None:
            with contextlib.suppress(ValueError):  # the endpoint's peer limit
                t.result().endpoint.add_peer(hint[1], hint[2], hint[3])
