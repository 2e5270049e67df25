"""One error family for the client; the CLI maps each class to an exit code (see docs/client.md)."""


class WormholeError(Exception):
    """Base class of every client error."""


class ServerConnectionError(WormholeError):
    """The mailbox server could not be reached (first connection failed)."""


class ServerError(WormholeError):
    """The mailbox server answered with an `error` message (the session closes with mood errory)."""


class WelcomeError(WormholeError):
    """The server's welcome carried an `error` (mood unwelcome)."""


class WrongCodeError(WormholeError):
    """The peer used a different code, or a message failed to decrypt (mood scary)."""

    def __init__(self, msg: str = "wrong code: the two sides used different codes (or a man in the middle)"):
        super().__init__(msg)


class LonelyError(WormholeError):
    """We closed before the peer ever showed up (mood lonely)."""


class PeerGoneError(WormholeError):
    """The peer closed or disappeared before the transfer finished."""


class CodeFormatError(WormholeError):
    """A code that is not `<digits>-word[-word...]`."""


class TimeoutError_(WormholeError):
    """A named wait ran out of time."""


class TransitError(WormholeError):
    """No transit connection could be made, or the record stream broke."""


class TransferError(WormholeError):
    """The file-transfer exchange failed (rejected, bad hash, remote error)."""


class TransferRejected(TransferError):
    """The local user (or a safety check) refused the offer."""
