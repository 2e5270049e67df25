"""What a transfer client says in its versions: Dilation offered, and Dilated File-Transfer's `transfer` block.

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


RECEIVER_WORMHOLE_KWARGS = {"dilation": True, "app_versions": app_versions("receive", "ask")}
SENDER_WORMHOLE_KWARGS = {"dilation": True, "app_versions": app_versions("send", "ask")}
