"""What a transfer client says in its versions: Dilation offered, Dilated File-Transfer's `transfer` block, and
whether a classic sender needs the receiver's SHA-256.

Importing it loads neither Dilation nor the transfer code, so `burrow receive` offers both, and learns
whether the sender uses them, before it loads either.
"""

from __future__ import annotations

FEATURES = ["core0"]  # Dilated File-Transfer features this client implements


def app_versions(mode: str, permission: str = "yes") -> dict:
    return {"transfer": {"mode": mode, "features": list(FEATURES), "permission": permission}}


def peer_transfer(peer_versions: dict | None) -> dict | None:
    """The peer's `transfer` version block, or None for a classic (file-transfer v1) peer."""
    t = ((peer_versions or {}).get("app_versions") or {}).get("transfer")
    return t if isinstance(t, dict) else None


def is_dilated_sender(peer_versions: dict | None) -> bool:
    t = peer_transfer(peer_versions)
    return t is not None and t.get("mode") in ("send", "connect")


def can_receive_dilated(peer_versions: dict | None) -> bool:
    """The peer takes Dilated File-Transfer offers (a burrow receiver; magic-wormhole 0.24 and
    wormhole-william say nothing of the kind, so they get a classic transfer)."""
    t = peer_transfer(peer_versions)
    return (t is not None and t.get("mode") in ("receive", "connect") and isinstance(t.get("features"), list)
            and "core0" in t["features"] and bool((peer_versions or {}).get("can-dilate")))


# A classic (file-transfer v1) sender that checks nothing in the receiver's ack says so in its app_versions;
# magic-wormhole and wormhole-william ignore keys they do not know. Its records are authenticated in order
# (secretbox, sequential nonces) and the byte count is checked, so the digest adds no integrity between
# burrow peers: a receiver then skips hashing every byte. Any other sender gets the digest, as always.
CLASSIC_SENDER_APP_VERSIONS = {"burrow": {"ack-sha256": "optional"}}


def _burrow(peer_versions: dict | None) -> dict:
    """The peer's `app_versions.burrow` block ({} for a peer that sent none)."""
    b = ((peer_versions or {}).get("app_versions") or {}).get("burrow")
    return b if isinstance(b, dict) else {}


def sender_needs_sha256(peer_versions: dict | None) -> bool:
    """False only when the sender said its classic ack needs no SHA-256 (CLASSIC_SENDER_APP_VERSIONS)."""
    return _burrow(peer_versions).get("ack-sha256") != "optional"


def one_path_sender(peer_versions: dict | None) -> bool:
    """The Dilated sender offers one FILE or DIR (`burrow send FILE`): its receiver treats `-o` as the target's
    path, as for a classic transfer, rather than as a folder for many files."""
    return _burrow(peer_versions).get("paths") == 1


def dilated_sender_versions(paths: int, inline: int | None = None) -> dict:
    """A Dilated File-Transfer sender's app_versions: it needs no digest in the acks, and offers `paths` paths
    (and, with `inline`, a file that small inside its offer message: apps/inline.py). magic-wormhole 0.24 and
    wormhole-william ignore all of it, so a sender offering Dilation to any peer stays a plain classic sender
    for them."""
    burrow = {**CLASSIC_SENDER_APP_VERSIONS["burrow"], "paths": paths}
    if inline is not None:
        burrow["inline-file"] = inline
    return {**app_versions("send", "ask"), "burrow": burrow}


# A file of at most INLINE_MAX bytes can travel inside the mailbox message that offers it (apps/inline.py):
# the receiver says the most it takes, the sender the size of its file; both must have said it.
INLINE_MAX = 64 * 1024


def _inline(peer_versions: dict | None) -> int | None:
    n = _burrow(peer_versions).get("inline-file")
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def inline_sender(peer_versions: dict | None) -> bool:
    """The sender offered a file small enough for us to take inside its message."""
    n = _inline(peer_versions)
    return n is not None and n <= INLINE_MAX


def takes_inline(peer_versions: dict | None, size: int) -> bool:
    """The receiver takes a file of `size` bytes inside the offer message."""
    n = _inline(peer_versions)
    return n is not None and size <= min(n, INLINE_MAX)


def prepare_dilated_transfer() -> None:
    """Load Dilation and Dilated File-Transfer in a thread while the code and key exchange run: between burrow
    peers a file goes that way, and the imports cost a few tenths of a second."""
    import burrow.client.apps.dilated_transfer_cli  # noqa: F401 - imported for its cost
    import burrow.client.dilation.aio  # noqa: F401


RECEIVER_WORMHOLE_KWARGS = {"dilation": True, "app_versions": {**app_versions("receive", "ask"),
                                                               "burrow": {"inline-file": INLINE_MAX}}}
SENDER_WORMHOLE_KWARGS = {"dilation": True, "app_versions": dilated_sender_versions(0)}  # 0: several paths
