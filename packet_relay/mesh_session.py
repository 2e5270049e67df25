"""One outbound mesh connection to a peer relay, as a protocol machine; sans-IO.

in:  bytes from the peer relay
out: bytes to send, and events: Watching (handshake done, WatchConns sent), SelfConnect (the peer's
     server key is our own: we dialled ourselves; Watching says whether the peer takes ForwardBatch), Present / Gone (its clients come and go), Synced
     (its initial client list is complete)
states: http (await 101) -> derp (DERP handshake) -> watching -> closed | self

The request is a plain DERP upgrade (`Upgrade: DERP` on /derp); ClientInfo carries the mesh key and
is sealed to the peer's server key, and the client key is this relay's own server key, as derper's
mesh clients do. After WatchConns a Ping goes out: the peer answers it after the list of clients it
already had, so everything announced before the Pong is that list (rank 0 in the forwarding table).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from burrow.wire.derp import frames as f
from burrow.wire.derp.connection import ClientConnection, Connected
from burrow.wire.derp.handshake import ClientInfoJSON

MAX_RESPONSE_HEAD = 16 * 1024


class MeshError(Exception):
    """The peer answered something that is not a DERP relay accepting our mesh key."""


@dataclass(frozen=True, slots=True)
class Watching:
    server_key: bytes
    forward_batch: bool = False  # the peer's ServerInfo says it takes ForwardBatch


@dataclass(frozen=True, slots=True)
class SelfConnect:
    server_key: bytes


@dataclass(frozen=True, slots=True)
class Present:
    key: bytes | tuple[str, bytes]   # a DERP key, or ("iroh", endpoint id) as the registry keys them
    initial: bool


@dataclass(frozen=True, slots=True)
class Gone:
    key: bytes | tuple[str, bytes]


@dataclass(frozen=True, slots=True)
class Synced:
    pass


class MeshSession:
    __slots__ = ("own_public", "machine", "state", "synced", "_head", "_out", "_sync_token")

    def __init__(self, private_key: bytes, own_public: bytes, mesh_key: bytes, host: str,
                 path: str = "/derp") -> None:
        self.own_public = own_public
        self.machine = ClientConnection(private_key, info=ClientInfoJSON(mesh_key=mesh_key.hex(),
                                                                         app_name="burrow-mesh"))
        self.state = "http"
        self.synced = False
        self._head = bytearray()
        self._sync_token = os.urandom(8)
        self._out = [f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: burrow-relay-mesh\r\n"
                     "Upgrade: DERP\r\nConnection: Upgrade\r\n\r\n".encode()]

    def data_to_send(self) -> bytes:
        if self.state in ("derp", "watching"):
            self._out.append(self.machine.data_to_send())
        out, self._out = b"".join(self._out), []
        return out

    def receive_data(self, data: bytes) -> list:
        if self.state == "http":
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > MAX_RESPONSE_HEAD:
                    raise MeshError("response head too large")
                return []
            status = bytes(self._head[:self._head.find(b"\r\n")]).split(b" ", 2)
            if len(status) < 2 or status[1] != b"101":
                raise MeshError("peer refused the upgrade: " + b" ".join(status).decode("latin-1"))
            data, self._head = bytes(self._head[end + 4:]), bytearray()
            self.state = "derp"
        if self.state not in ("derp", "watching"):
            return []
        events: list = []
        for ev in self.machine.receive_data(data):
            t = type(ev)
            if t is f.PeerPresent:
                if ev.flags & f.PRESENT_IS_IROH:
                    events.append(Present(("iroh", ev.key), not self.synced))
                elif not ev.flags & f.PRESENT_IS_MESH_PEER:  # another relay's mesh link, not a client
                    events.append(Present(ev.key, not self.synced))
            elif t is f.PeerGone:
                events.append(Gone(("iroh", ev.key) if ev.reason == f.PEER_GONE_IROH else ev.key))
            elif t is f.Pong:
                if ev.data == self._sync_token and not self.synced:
                    self.synced = True
                    events.append(Synced())
            elif t is Connected:
                if ev.server_key == self.own_public:
                    self.state = "self"
                    return [SelfConnect(ev.server_key)]
                self.state = "watching"
                self._out.append(f.WatchConns().encode() + f.Ping(self._sync_token).encode())
                events.append(Watching(ev.server_key, ev.info.forward_batch))
            elif t is f.Health and ev.problem:
                raise MeshError(f"peer refused: {ev.problem}")
        return events

    def ping(self) -> bytes:
        return f.Ping(os.urandom(8)).encode()

    @staticmethod
    def forward_iroh_head(src: bytes, dst: bytes, kind: int, size: int) -> bytes:
        """A ForwardIroh frame up to the datagram frame's body (which follows unchanged)."""
        return f.header(f.FORWARD_IROH, 2 * f.KEY_LEN + 1 + size) + src + dst + bytes([kind])
