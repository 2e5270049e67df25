"""What a client says about Dilation in its `versions` phase. Importing it loads no Dilation code, so a
receiver can offer Dilation before it knows whether the sender will use it."""

from __future__ import annotations

SUPPORTED_VERSIONS = ("ged", "1")  # magic-wormhole 0.24's record numbering first, then the specification's
ABILITIES = [{"type": "direct-tcp-v1"}, {"type": "relay-v1"}]  # connection kinds this client offers


def versions_fields(versions: tuple[str, ...] = SUPPORTED_VERSIONS) -> dict:
    """The keys this client adds to its `versions` phase."""
    return {"can-dilate": list(versions), "dilation-abilities": list(ABILITIES)}
