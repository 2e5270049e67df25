"""Key schedule, exactly as magic-wormhole 0.24 does it (PAKE, key derivation, message boxes).

* PAKE: SPAKE2_Symmetric(NFC-utf8(code), idSymmetric=utf8(appid)); body {"pake_v1": hex(msg)}.
* Phase key: HKDF-SHA256(K, 32, info=b"wormhole:phase:" + sha256(side) + sha256(phase)), no salt,
  where side is the SENDER's mailbox side.
* Phase body: nonce(24) || secretbox(plaintext), hex-encoded on the wire.
* Verifier: HKDF(K, 32, b"wormhole:verifier"); derive_key(purpose): HKDF(K, n, utf8(purpose)).
"""

from __future__ import annotations

import hashlib
import json
import os
import unicodedata

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from nacl.exceptions import CryptoError
from nacl.secret import SecretBox
from spake2 import SPAKE2_Symmetric
from spake2.spake2 import SPAKEError

from .errors import WrongCodeError

KEY_SIZE = SecretBox.KEY_SIZE
NONCE_SIZE = SecretBox.NONCE_SIZE


def to_bytes(text: str) -> bytes:
    return unicodedata.normalize("NFC", text).encode("utf-8")


def hkdf(skm: bytes, length: int, info: bytes) -> bytes:
    return HKDF(hashes.SHA256(), length, None, info).derive(skm)


def derive_key(key: bytes, purpose: bytes, length: int = KEY_SIZE) -> bytes:
    return hkdf(key, length, purpose)


def phase_purpose(side: str, phase: str) -> bytes:
    return (b"wormhole:phase:" + hashlib.sha256(side.encode("ascii")).digest()
            + hashlib.sha256(phase.encode("ascii")).digest())


def derive_phase_key(key: bytes, side: str, phase: str) -> bytes:
    return derive_key(key, phase_purpose(side, phase))


def derive_verifier(key: bytes) -> bytes:
    return derive_key(key, b"wormhole:verifier")


def encrypt_data(key: bytes, plaintext: bytes, nonce: bytes | None = None) -> bytes:
    if nonce is None:
        nonce = os.urandom(NONCE_SIZE)
    return bytes(SecretBox(key).encrypt(plaintext, nonce))


def decrypt_data(key: bytes, data: bytes) -> bytes:
    """Raise WrongCodeError when the MAC does not verify (the peer has another key)."""
    try:
        return SecretBox(key).decrypt(data)
    except CryptoError as e:
        raise WrongCodeError() from e


class Pake:
    """One side of the SPAKE2 exchange."""

    def __init__(self, code: str, appid: str):
        self._sp = SPAKE2_Symmetric(to_bytes(code), idSymmetric=to_bytes(appid))
        self.outbound = self._sp.start()

    def body(self) -> bytes:
        return json.dumps({"pake_v1": self.outbound.hex()}).encode("utf-8")

    def finish(self, peer_body: bytes) -> bytes:
        """Return the shared key K; a malformed peer message counts as a wrong code (scary)."""
        try:
            msg = json.loads(peer_body.decode("utf-8"))
            return self._sp.finish(bytes.fromhex(msg["pake_v1"]))
        except (ValueError, KeyError, TypeError, SPAKEError) as e:
            raise WrongCodeError("bad PAKE message from peer") from e
