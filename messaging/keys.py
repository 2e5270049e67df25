"""secp256k1 keys, signatures and key files, encoded as Skywire's skycoin `cipher` package encodes them.

- Public key: 33-byte SEC1 compressed point; in JSON and URLs 66 lowercase hex digits.
- Secret key: 32 bytes; key files hold it as one line of 64 hex digits.
- Signature: `r(32) || s(32) || recovery id(1)` over SHA-256 of the payload (skycoin `SignHash`),
  hex-encoded (130 digits). It is verified as skycoin does: recover the signer's key and compare.
- ECDH: SHA-256 of the compressed shared point (skycoin `ECDH`); Noise appends a zero byte (noise.py).

libsecp256k1 (through coincurve) does all of it: its recoverable signatures have this exact layout and its
default ECDH hash is skycoin's.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import coincurve

from .errors import KeyFormatError

PUBLIC_KEY_LEN = 33
SECRET_KEY_LEN = 32
SIGNATURE_LEN = 65


def parse_public_key(value: str | bytes) -> bytes:
    """A public key from 66 hex digits or 33 bytes; refuses anything that is not a point on the curve."""
    raw = _from_hex(value, PUBLIC_KEY_LEN, "public key") if isinstance(value, str) else bytes(value)
    if len(raw) != PUBLIC_KEY_LEN or raw[0] not in (2, 3):
        raise KeyFormatError("public key must be 33 bytes, compressed (02/03 prefix)")
    try:
        coincurve.PublicKey(raw)
    except ValueError as exc:
        raise KeyFormatError("public key is not a point on secp256k1") from exc
    return raw


def parse_signature(value: str) -> bytes:
    return _from_hex(value, SIGNATURE_LEN, "signature")


def _from_hex(text: str, length: int, what: str) -> bytes:
    if len(text) != 2 * length:
        raise KeyFormatError(f"{what} must be {2 * length} hex digits")
    try:
        return bytes.fromhex(text)
    except ValueError as exc:
        raise KeyFormatError(f"{what} is not hex") from exc


class SecretKey:
    """A secp256k1 key pair; `public` is the 33-byte compressed public key."""

    __slots__ = ("_key", "public", "secret")

    def __init__(self, secret: bytes) -> None:
        if len(secret) != SECRET_KEY_LEN:
            raise KeyFormatError("secret key must be 32 bytes")
        try:
            self._key = coincurve.PrivateKey(secret)
        except ValueError as exc:
            raise KeyFormatError("secret key is out of range for secp256k1") from exc
        self.secret = bytes(secret)
        self.public = self._key.public_key.format(compressed=True)

    @classmethod
    def generate(cls) -> SecretKey:
        return cls(coincurve.PrivateKey().secret)

    def sign(self, payload: bytes) -> bytes:
        """65-byte recoverable signature of SHA-256(payload)."""
        return self._key.sign_recoverable(payload, hasher=_sha256)

    def ecdh(self, public: bytes) -> bytes:
        """SHA-256 of the compressed shared point (32 bytes)."""
        return self._key.ecdh(public)

    def __repr__(self) -> str:  # never print the secret
        return f"SecretKey(public={self.public.hex()})"


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def verify(public: bytes, signature: bytes, payload: bytes) -> bool:
    """True when `signature` over SHA-256(payload) recovers exactly `public`."""
    if len(signature) != SIGNATURE_LEN or signature[64] > 3:
        return False
    try:
        recovered = coincurve.PublicKey.from_signature_and_message(signature, payload, hasher=_sha256)
    except (ValueError, TypeError):
        return False
    return recovered.format(compressed=True) == public


def load_or_create(path: str | os.PathLike | None) -> SecretKey:
    """The key in `path` (64 hex digits), created with mode 0600 when the file does not exist.

    Without a path the key is new on every start.
    """
    if path is None:
        return SecretKey.generate()
    p = Path(path)
    if p.exists():
        text = p.read_text().strip()
        return SecretKey(_from_hex(text, SECRET_KEY_LEN, "secret key in " + str(p)))
    p.parent.mkdir(parents=True, exist_ok=True)
    key = SecretKey.generate()
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.secret.hex() + "\n")
    return key
