"""DERP handshake crypto and JSON, sans-IO.

ClientInfo = client public key | 24-byte nonce | NaCl box(JSON) sealed from the client's private key
to the server's public key; ServerInfo = nonce | box(JSON) the other way. Keys are raw 32-byte
Curve25519 (X25519) keys, the same as a WireGuard node key.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import nacl.exceptions
import nacl.public

from .frames import KEY_LEN, PROTOCOL_VERSION, ClientInfo, HandshakeError, ServerInfo

MAX_INFO_JSON = 1 << 20


def generate_private_key() -> bytes:
    return bytes(nacl.public.PrivateKey.generate())


def public_key(private: bytes) -> bytes:
    return bytes(nacl.public.PrivateKey(private).public_key)


def seal(my_private: bytes, their_public: bytes, message: bytes) -> bytes:
    """nonce | box, the layout of Go's key.NodePrivate.SealTo."""
    box = nacl.public.Box(nacl.public.PrivateKey(my_private), nacl.public.PublicKey(their_public))
    return bytes(box.encrypt(message, os.urandom(24)))


def open_sealed(my_private: bytes, their_public: bytes, sealed: bytes) -> bytes:
    try:
        box = nacl.public.Box(nacl.public.PrivateKey(my_private), nacl.public.PublicKey(their_public))
        return box.decrypt(sealed)
    except (nacl.exceptions.CryptoError, ValueError, TypeError) as exc:
        raise HandshakeError("cannot open the sealed handshake box") from exc


def _json_object(raw: bytes, what: str) -> dict:
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HandshakeError(f"{what} JSON does not parse") from exc
    if not isinstance(obj, dict):
        raise HandshakeError(f"{what} JSON is not an object")
    return obj


@dataclass(frozen=True)
class ClientInfoJSON:
    """Field names as Tailscale's client sends them; unknown fields are ignored."""

    version: int = PROTOCOL_VERSION
    can_ack_pings: bool = True
    mesh_key: str | None = None
    is_prober: bool = False
    app_name: str | None = None

    def to_json(self) -> bytes:
        obj: dict = {}
        if self.mesh_key:
            obj["meshKey"] = self.mesh_key
        if self.version:
            obj["version"] = self.version
        obj["CanAckPings"] = self.can_ack_pings
        if self.is_prober:
            obj["IsProber"] = True
        if self.app_name:
            obj["AppName"] = self.app_name
        return json.dumps(obj, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ClientInfoJSON:
        obj = _json_object(raw, "ClientInfo")
        version = obj.get("version", 0)
        mesh = obj.get("meshKey")
        app = obj.get("AppName")
        return cls(
            version=version if isinstance(version, int) and not isinstance(version, bool) else 0,
            can_ack_pings=obj.get("CanAckPings") is True,
            mesh_key=mesh if isinstance(mesh, str) else None,
            is_prober=obj.get("IsProber") is True,
            app_name=app if isinstance(app, str) else None,
        )


@dataclass(frozen=True)
class ServerInfoJSON:
    version: int = PROTOCOL_VERSION
    token_bucket_bytes_per_second: int = 0
    token_bucket_bytes_burst: int = 0
    forward_batch: bool = False  # burrow: this relay takes ForwardBatch frames from its mesh peers

    def to_json(self) -> bytes:
        obj: dict = {"version": self.version}
        if self.forward_batch:
            obj["burrowForwardBatch"] = True
        if self.token_bucket_bytes_per_second:
            obj["TokenBucketBytesPerSecond"] = self.token_bucket_bytes_per_second
        if self.token_bucket_bytes_burst:
            obj["TokenBucketBytesBurst"] = self.token_bucket_bytes_burst
        return json.dumps(obj, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ServerInfoJSON:
        obj = _json_object(raw, "ServerInfo")

        def num(name: str) -> int:
            v = obj.get(name, 0)
            return v if isinstance(v, int) and not isinstance(v, bool) else 0

        return cls(num("version"), num("TokenBucketBytesPerSecond"), num("TokenBucketBytesBurst"),
                   obj.get("burrowForwardBatch") is True)


def make_client_info(client_private: bytes, server_public: bytes, info: ClientInfoJSON) -> ClientInfo:
    return ClientInfo(public_key(client_private), seal(client_private, server_public, info.to_json()))


def open_client_info(server_private: bytes, frame: ClientInfo) -> ClientInfoJSON:
    if len(frame.key) != KEY_LEN:
        raise HandshakeError("ClientInfo: bad key length")
    return ClientInfoJSON.from_json(open_sealed(server_private, frame.key, frame.sealed))


def make_server_info(server_private: bytes, client_public: bytes, info: ServerInfoJSON) -> ServerInfo:
    return ServerInfo(seal(server_private, client_public, info.to_json()))


def open_server_info(client_private: bytes, server_public: bytes, frame: ServerInfo) -> ServerInfoJSON:
    return ServerInfoJSON.from_json(open_sealed(client_private, server_public, frame.sealed))
