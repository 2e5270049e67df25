"""The messaging package's one error family.

Every `ProtocolError` carries a short `reason` (a metric label, never a key or address). After one, the
link or channel that caused it is closed and its state machine is terminal.
"""

from __future__ import annotations


class MessagingError(Exception):
    """Base of everything this package raises on purpose."""


class KeyFormatError(MessagingError, ValueError):
    """A key, signature or key file that cannot be used (bad hex, length or curve point)."""


class ProtocolError(MessagingError):
    """The remote end broke the protocol; `reason` says how in a few words."""

    def __init__(self, message: str, reason: str = "protocol") -> None:
        super().__init__(message)
        self.reason = reason


class HandshakeError(ProtocolError):
    """The link handshake failed (bad frame, wrong key, bad signature, refused).

    `reply` holds bytes to send before closing (the responder's frame 4 with `accepted: false`).
    """

    def __init__(self, message: str, reason: str = "handshake", reply: bytes = b"") -> None:
        super().__init__(message, reason)
        self.reply = reply


class ChannelError(ProtocolError):
    """A channel's Noise handshake or a ciphertext failed."""

    def __init__(self, message: str, reason: str = "noise") -> None:
        super().__init__(message, reason)
