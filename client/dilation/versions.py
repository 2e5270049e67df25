"""What a client says about Dilation in its `versions` phase. Importing it loads no Dilation code, so a
receiver can offer Dilation before it knows whether the sender will use it."""

from __future__ import annotations

from ..nat import SIMOPEN_ABILITY as SIMOPEN  # tcp-simultaneous-open-v1 (client/nat/hints.py)

SUPPORTED_VERSIONS = ("ged", "1")  # magic-wormhole 0.24's record numbering first, then the specification's
ABILITIES = [{"type": "direct-tcp-v1"}, {"type": "relay-v1"}, SIMOPEN]  # connection kinds this client offers
# extensions beyond the specification, used only with a peer that lists them too (other clients ignore the key):
# "stop-v1": a STOP record tells the peer we stopped for good, so it reports "stopped" instead of reconnecting
STOP_EXTENSION = "stop-v1"
# "upgrade-v1": while connected over the transit relay the Leader looks for a direct path and moves to it in a
# new generation, and the Follower keeps that generation's listener open for the Leader's probes
UPGRADE_EXTENSION = "upgrade-v1"
# "relay-first-v1" (with upgrade-v1): the relay is dialled at once and may carry the first bytes; the generation's
# direct attempts go on behind it, and one that completes its handshake moves the traffic in a new generation
RELAY_FIRST_EXTENSION = "relay-first-v1"
EXTENSIONS = [STOP_EXTENSION, UPGRADE_EXTENSION, RELAY_FIRST_EXTENSION]


def versions_fields(versions: tuple[str, ...] = SUPPORTED_VERSIONS) -> dict:
    """The keys this client adds to its `versions` phase."""
    return {"can-dilate": list(versions), "dilation-abilities": list(ABILITIES),
            "burrow-dilation-extensions": list(EXTENSIONS)}


def peer_extensions(peer_versions: dict) -> set[str]:
    found = peer_versions.get("burrow-dilation-extensions")
    return {e for e in found if isinstance(e, str)} if isinstance(found, list) else set()
