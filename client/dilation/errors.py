"""The one error family of the Dilation package."""

from __future__ import annotations


class ProtocolError(Exception):
    """The peer broke the Dilation protocol; the L2 connection that carried it is dropped."""


class FramingError(ProtocolError):
    """Bad relay answer, prologue or frame length."""


class NoiseError(ProtocolError):
    """The Noise handshake or a transport message failed to authenticate."""


class RecordError(ProtocolError):
    """A decrypted record could not be parsed."""


class DilationError(Exception):
    """Local misuse or a failed dilation (no shared version, closed subchannel, ...)."""


class DilationTimeout(DilationError, TimeoutError):
    """`dilate(timeout=...)`: the peer's versions did not arrive in time."""


class OldPeerCannotDilate(DilationError):
    """The peer's `can-dilate` list shares no version with ours."""


class SubchannelClosed(DilationError):
    """A write or close on a subchannel that this side already closed."""
