"""The root of every wire codec's errors: bytes from the peer that do not follow the protocol.

Each codec raises its own subclass (DERP's ProtocolError, WebSocketError, HttpError, StunError,
IrohProtocolError, DiscoError); `reason` is the short label the servers count errors by.
"""

from __future__ import annotations


class WireError(ValueError):
    """Input that does not follow the protocol; the connection (or datagram) that sent it is dropped."""

    reason = "protocol"
