"""Who is connected, by public key, and where a packet goes; protocol-neutral.

A peer is any connection object with the RegistryPeer interface below (DERP's RelayConn, iroh's
IrohConn).

Duplicate keys: every connection stays open, and the one that receives is the most recent to
connect, then whichever most recently sent (derper's "last writer is active"). At most
`max_dups_per_key` connections per key: the oldest beyond that is closed as `duplicate`.
PeerGone(Disconnected) goes to every peer that received from a key when its last connection goes.

With a mesh (mesh.py), a key no local client holds, or one a newer connection on a peer relay took
over (mesh_table.py), goes out on the mesh link the forwarding table names.
"""

from __future__ import annotations

from typing import Protocol

from burrow.common.limits import TokenBucket
from burrow.wire.derp.frames import (
    FRAME_HEADER_LEN,
    KEY_LEN,
    PEER_GONE_DISCONNECTED,
    PEER_GONE_IROH,
    PEER_GONE_NOT_HERE,
    PRESENT_IS_IROH,
    PRESENT_IS_MESH_PEER,
    PRESENT_IS_REGULAR,
)

from .stats import RelayStats

DISCO_MAGIC = "TS💬".encode()
DISCO_MIN_LEN = 62
MAX_SENT_TO = 4096          # receivers remembered per source for PeerGone
NOT_HERE_RATE = 1.0         # PeerGone(NotHere) replies per second per sender, burst 3
NOT_HERE_BURST = 3
RECV_OVERHEAD = FRAME_HEADER_LEN + KEY_LEN  # a RecvPacket frame's bytes before its payload


class RegistryPeer(Protocol):
    """A registered client as the registry drives it."""

    key: object      # DERP: the 32-byte Curve25519 key; iroh: ("iroh", endpoint id)
    protocol: str    # "derp" or "iroh"
    phase: str

    def deliver(self, src: bytes, payload: bytes) -> None:
        """Queue one packet from `src` (drops are the peer's business)."""

    def peer_gone(self, key: bytes, reason: int) -> None:
        """Tell it a key it received from left (or, for disco, is not here)."""

    def peer_present(self, key: bytes, flags: int) -> None:
        """Mesh watchers only: a key arrived."""

    def close(self, reason: str, abort: bool = False) -> None:
        """Close with an event-log close_reason."""


class MeshRoutes(Protocol):
    """The mesh forwarding table as the registry uses it (mesh_table.ForwardingTable)."""

    routes: dict      # key -> a link with forward(src, dst, payload) -> bool and forward_frames (mesh.py)
    shadowed: set     # local keys a newer connection on a peer relay took over

    def local_arrived(self, key) -> None: ...
    def local_left(self, key) -> None: ...


def _announced(peer: RegistryPeer) -> tuple[bytes, int]:
    """How a watcher hears of a key: DERP keys as they are, iroh endpoint ids with the iroh flag."""
    if peer.protocol == "derp":
        return peer.key, PRESENT_IS_MESH_PEER if getattr(peer, "mesh", False) else PRESENT_IS_REGULAR
    return peer.key[1], PRESENT_IS_IROH


def looks_like_disco(payload: bytes) -> bool:
    return len(payload) >= DISCO_MIN_LEN and payload[:6] == DISCO_MAGIC


class Registry:
    def __init__(self, stats: RelayStats, max_dups_per_key: int = 8) -> None:
        self.stats = stats
        self.max_dups_per_key = max_dups_per_key
        self._active: dict[object, RegistryPeer] = {}
        self._conns: dict[object, list[RegistryPeer]] = {}
        self._sent_to: dict[bytes, set[bytes]] = {}
        self._not_here: dict[bytes, TokenBucket] = {}
        self.watchers: set[RegistryPeer] = set()
        self.mesh: MeshRoutes | None = None
        self._mesh_routes: dict = {}
        self._shadowed: set = set()

    def attach_mesh(self, mesh: MeshRoutes) -> None:
        self.mesh = mesh
        self._mesh_routes = mesh.routes
        self._shadowed = mesh.shadowed

    def __len__(self) -> int:
        return sum(len(v) for v in self._conns.values())

    def __contains__(self, key: bytes) -> bool:
        return key in self._active

    def active(self, key: bytes):
        return self._active.get(key)

    def remote(self, key, local) -> object | None:
        """The mesh link to send `key`'s traffic to instead of `local` (its local connection, or None)."""
        if local is None or key in self._shadowed:
            return self._mesh_routes.get(key)
        return None

    def peers(self) -> list[RegistryPeer]:
        return [p for conns in self._conns.values() for p in conns]

    def register(self, peer: RegistryPeer) -> None:
        conns = self._conns.setdefault(peer.key, [])
        if conns:
            self.stats.dup_conns += 1
        conns.append(peer)
        self._active[peer.key] = peer
        self.stats.clients[peer.protocol] += 1
        if len(conns) > self.max_dups_per_key:
            conns[0].close("duplicate")  # its unregister() runs from close()
        if self.mesh is not None:
            self.mesh.local_arrived(peer.key)
        if len(conns) == 1 and self.watchers:
            key, flags = _announced(peer)
            for w in self.watchers:
                if w is not peer:
                    w.peer_present(key, flags)

    def unregister(self, peer: RegistryPeer) -> None:
        conns = self._conns.get(peer.key)
        if not conns or peer not in conns:
            return
        conns.remove(peer)
        self.watchers.discard(peer)
        self.stats.clients[peer.protocol] -= 1
        if conns:
            if self._active.get(peer.key) is peer:
                self._active[peer.key] = conns[-1]
            return
        del self._conns[peer.key]
        self._active.pop(peer.key, None)
        self._not_here.pop(peer.key, None)
        if self.mesh is not None:
            self.mesh.local_left(peer.key)
        for dst in self._sent_to.pop(peer.key, ()):
            receiver = self._active.get(dst)
            if receiver is not None:
                receiver.peer_gone(peer.key, PEER_GONE_DISCONNECTED)
        if self.watchers:
            key, reason = (peer.key, PEER_GONE_DISCONNECTED) if peer.protocol == "derp" else (peer.key[1], PEER_GONE_IROH)
            for w in self.watchers:
                w.peer_gone(key, reason)

    def note_activity(self, peer: RegistryPeer) -> None:
        """A connection sent something: with duplicates, it becomes the one that receives."""
        if self._active.get(peer.key) is not peer and len(self._conns.get(peer.key, ())) > 1:
            self._active[peer.key] = peer

    def route_frames(self, sender: RegistryPeer, dst: bytes, frames: list[bytes], nbytes: int,
                     now: float) -> tuple[int, int]:
        """Deliver packets from `sender` to the active connection of `dst` (or its mesh link), given as the
        RecvPacket frames the receiver gets (wire Sends: one read's packets for one destination); `nbytes`
        is their payload. Returns the packets and payload bytes that went on; the caller counts them into
        stats.packets/bytes (once per read: cheaper)."""
        receiver = self._active.get(dst)
        if receiver is None or dst in self._shadowed:
            link = self._mesh_routes.get(dst)
            if link is not None:
                return link.forward_frames(sender.key, dst, frames, sender)
        if receiver is None:
            self.stats.drops[(sender.protocol, "unknown_dest")] += len(frames)
            for frame in frames:
                if looks_like_disco(frame[RECV_OVERHEAD:]):
                    self._reply_not_here(sender, dst, now)
            return 0, 0
        receiver.deliver_frames_queued(frames)
        seen = self._sent_to.get(sender.key)
        if seen is None:
            self._sent_to[sender.key] = {dst}
        elif dst not in seen and len(seen) < MAX_SENT_TO:
            seen.add(dst)
        return len(frames), nbytes

    def _reply_not_here(self, sender: RegistryPeer, dst: bytes, now: float) -> None:
        bucket = self._not_here.get(sender.key)
        if bucket is None:
            bucket = self._not_here[sender.key] = TokenBucket(NOT_HERE_RATE, NOT_HERE_BURST, now)
        if bucket.take(1, now):
            sender.peer_gone(dst, PEER_GONE_NOT_HERE)

    def add_watcher(self, peer: RegistryPeer) -> None:
        """Mesh peers watch: every current key now, then each arrival and departure."""
        self.watchers.add(peer)
        for key, conn in self._active.items():
            if key != peer.key:
                peer.peer_present(*_announced(conn))

    def close_key(self, key: bytes, reason: str) -> int:
        conns = list(self._conns.get(key, ()))
        for p in conns:
            p.close(reason)
        return len(conns)
