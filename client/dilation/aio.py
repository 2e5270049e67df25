"""The asyncio face of Dilation: `dilated = await dilate(wormhole)`, then subchannels as stream pairs.

in:  an open client.wormhole.Wormhole created with `versions_extra=DILATION_VERSIONS` (its hooks: send_phase,
     dilate_messages, derive_key, get_peer_versions, transit_helper)
out: a runtime.Dilation: `await d.open(name)` -> (reader, writer), `d.listen(name)` -> listener with
     `await accept()`, `on_status` events (wanting, connecting, connected + path, reconnecting, stopped),
     `await d.close()`
"""

from __future__ import annotations

from collections.abc import Callable

from burrow.client.dilation.runtime import Dilation, DilationStatus

from ..heap import retain_freed_memory
from .manager import versions_fields
from .stream import SubchannelListener

DILATION_VERSIONS = versions_fields()  # pass as Wormhole(..., versions_extra=DILATION_VERSIONS)


async def dilate(wormhole, *, transit_relay: str | None = None, listen: bool = True,
                 listen_addresses: list[str] | None = None, ping_interval: float = 30.0,
                 relay_delay: float = 2.0, on_status: Callable[[DilationStatus], None] | None = None,
                 side: str | None = None, **kwargs) -> Dilation:
    """Dilate an open client.wormhole.Wormhole created with `versions_extra=DILATION_VERSIONS`.

    Waits for the peer's versions, then returns at once (before any connection exists); use
    `await dilated.when_connected()` to wait for the first connection.
    """
    retain_freed_memory()  # client/heap.py: bulk transfers otherwise fault freed pages back in all the time
    peer_versions = await wormhole.get_peer_versions()
    key = wormhole.derive_key("dilation-v1", 32)
    d = Dilation(send_phase=wormhole.send_phase, dilation_key=key,
                 transit_relay=transit_relay if transit_relay is not None else wormhole.transit_helper,
                 listen=listen, listen_addresses=listen_addresses, ping_interval=ping_interval,
                 relay_delay=relay_delay, on_status=on_status, side=side, **kwargs)
    d.start(peer_versions)
    d._spawn(_pump(wormhole, d))
    return d


async def _pump(wormhole, d: Dilation) -> None:
    while True:
        _phase, plaintext = await wormhole.dilate_messages.get()
        d.received_message(plaintext)


__all__ = ["DILATION_VERSIONS", "Dilation", "DilationStatus", "SubchannelListener", "dilate"]
