"""The asyncio face of Dilation: `dilated = await dilate(wormhole)`, then subchannels as stream pairs.

in:  an open client.wormhole.Wormhole created with `dilation=True` (its hooks: our_versions, send_phase,
     dilate_messages, derive_key, get_peer_versions, transit_helper)
out: a runtime.Dilation: `await d.open(name)` -> (reader, writer), `d.listen(name)` -> listener with
     `await accept()`, `on_status` events (wanting, connecting, connected + path, reconnecting, stopped),
     `await d.close()`
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from burrow.client.dilation.runtime import Dilation, DilationStatus

from ..heap import retain_freed_memory
from .errors import DilationError, DilationTimeout, OldPeerCannotDilate
from .manager import SUPPORTED_VERSIONS, versions_fields
from .stream import SubchannelListener

# what Wormhole(..., dilation=True) adds to the `version` message; passing it as versions_extra= is the same
DILATION_VERSIONS = versions_fields()


def offered_versions(wormhole) -> tuple[str, ...]:
    """The Dilation versions the wormhole offered the peer; the runtime negotiates exactly these."""
    offered = wormhole.our_versions.get("can-dilate")
    if not offered:
        raise DilationError("this wormhole did not offer Dilation: create it with Wormhole(..., dilation=True)")
    unknown = [v for v in offered if v not in SUPPORTED_VERSIONS]
    if unknown:
        raise DilationError(f"the wormhole offers Dilation versions {unknown!r} this client does not speak "
                            f"(it speaks {list(SUPPORTED_VERSIONS)!r})")
    return tuple(offered)


async def dilate(wormhole, *, transit_relay: str | None = None, listen: bool = True,
                 listen_addresses: list[str] | None = None, ping_interval: float = 30.0,
                 relay_delay: float = 2.0, on_status: Callable[[DilationStatus], None] | None = None,
                 side: str | None = None, timeout: float | None = None, **kwargs) -> Dilation:
    """Dilate an open client.wormhole.Wormhole created with `dilation=True`.

    Waits (at most `timeout` seconds, None = as long as the wormhole lives) for the peer's versions, then
    returns at once (before any connection exists); use `await dilated.when_connected()` to wait for the
    first connection. Raises DilationError when the wormhole did not offer Dilation, DilationTimeout when
    the peer's versions do not arrive in time, OldPeerCannotDilate when the peer offers no shared version.
    """
    versions = offered_versions(wormhole)
    asked = kwargs.pop("versions", None)
    if asked is not None and tuple(asked) != versions:
        raise DilationError(f"versions={tuple(asked)!r} differs from the {versions!r} the wormhole offered; "
                            "offer what you mean to use: Wormhole(..., versions_extra={'can-dilate': [...]})")
    retain_freed_memory()  # client/heap.py: bulk transfers otherwise fault freed pages back in all the time
    try:
        async with asyncio.timeout(timeout):
            peer_versions = await wormhole.get_peer_versions()
    except TimeoutError:
        raise DilationTimeout(f"the peer's versions did not arrive within {timeout} s") from None
    key = wormhole.derive_key("dilation-v1", 32)
    d = Dilation(send_phase=wormhole.send_phase, dilation_key=key,
                 transit_relay=transit_relay if transit_relay is not None else wormhole.transit_helper,
                 listen=listen, listen_addresses=listen_addresses, ping_interval=ping_interval,
                 relay_delay=relay_delay, on_status=on_status, side=side, versions=versions,
                 **{"nat": getattr(wormhole, "nat", None), **kwargs})
    d.start(peer_versions)
    if d.status.state == "failed":
        raise OldPeerCannotDilate(d.status.reason)
    d._spawn(_pump(wormhole, d))
    return d


async def _pump(wormhole, d: Dilation) -> None:
    while True:
        _phase, plaintext = await wormhole.dilate_messages.get()
        d.received_message(plaintext)


__all__ = ["DILATION_VERSIONS", "Dilation", "DilationError", "DilationStatus", "DilationTimeout",
           "OldPeerCannotDilate", "SubchannelListener", "dilate"]
