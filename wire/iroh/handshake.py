"""The iroh relay login, as both ends compute it: the subprotocol names and what a client signs."""

from __future__ import annotations

import blake3

SIGNATURE_CONTEXT = "iroh-relay handshake v1 challenge signature"
SUBPROTOCOLS = ("iroh-relay-v2", "iroh-relay-v1")


def challenge_message(challenge: bytes) -> bytes:
    """What a client signs: blake3 derive_key over the server's 16-byte challenge."""
    return blake3.blake3(challenge, derive_key_context=SIGNATURE_CONTEXT).digest()


def pick_subprotocol(offered: str | None) -> str | None:
    """Echo the highest iroh relay version the client offered, or None (-> HTTP 400)."""
    names = {p.strip() for p in (offered or "").split(",")}
    for name in SUBPROTOCOLS:
        if name in names:
            return name
    return None
