"""DERP v2 wire format and state machines, sans-IO (no sockets, no asyncio, the clock passed in)."""

from .connection import ClientConnection, ClientHello, Connected, ServerConnection, Throttled
from .frames import FrameDecoder, FrameTooLarge, HandshakeError, MalformedFrame, ProtocolError, decode_frame

__all__ = [
    "ClientConnection", "ClientHello", "Connected", "FrameDecoder", "FrameTooLarge", "HandshakeError",
    "MalformedFrame", "ProtocolError", "ServerConnection", "Throttled", "decode_frame",
]
