"""Noise KK over secp256k1 for channels: `Noise_KK_Secp256k1_ChaChaPoly_SHA256`, as Skywire runs it.

in:  NoiseMessage1 / NoiseMessage2 (49 bytes each) and ciphertexts; out: the same, and plaintexts.
states: handshake (initiator writes message 1, responder reads it and writes message 2) -> transport.

- DH is skycoin's ECDH, SHA-256 of the compressed shared point, with one zero byte appended so that
  DHLEN (33) equals the public key length, as the specification requires. Public keys are 33-byte compressed.
- Hash SHA-256 and the name's DH part "Secp256k1" are Skywire's (flynn/noise builds the protocol name
  from its cipher suite); prologue and handshake payloads are empty, so each message is e (33) + tag (16).
- Transport: each direction's CipherState is rekeyed (Noise REKEY) just before its 10th, 20th, ...
  message, as Skywire's noise.Encrypt/Decrypt do; nonces keep counting across rekeys.

The Noise state machine is noiseprotocol's, given a backend that knows this DH.
"""

from __future__ import annotations

import warnings

from cryptography.exceptions import InvalidTag
from noise.backends.default import DefaultNoiseBackend
from noise.connection import Keypair, NoiseConnection
from noise.exceptions import NoiseInvalidMessage
from noise.functions.dh import DH
from noise.functions.keypair import KeyPair

from . import keys
from .errors import ChannelError, KeyFormatError

PROTOCOL_NAME = b"Noise_KK_Secp256k1_ChaChaPoly_SHA256"
DHLEN = 33
MESSAGE_LEN = DHLEN + 16
REKEY_EVERY = 10  # Skywire's packetsTillRekey


class Secp256k1KeyPair(KeyPair):
    @classmethod
    def from_private_bytes(cls, private_bytes: bytes) -> Secp256k1KeyPair:
        secret = keys.SecretKey(bytes(private_bytes))
        return cls(private=secret, public=secret.public, public_bytes=secret.public)

    @classmethod
    def from_public_bytes(cls, public_bytes: bytes) -> Secp256k1KeyPair:
        try:
            public = keys.parse_public_key(bytes(public_bytes))
        except KeyFormatError as exc:
            raise ChannelError(f"bad Noise public key: {exc}", "noise_key") from exc
        return cls(public=public, public_bytes=public)


class Secp256k1(DH):
    @property
    def klass(self):
        return Secp256k1KeyPair

    @property
    def dhlen(self) -> int:
        return DHLEN

    def generate_keypair(self) -> Secp256k1KeyPair:
        secret = keys.SecretKey.generate()
        return Secp256k1KeyPair(private=secret, public=secret.public, public_bytes=secret.public)

    def dh(self, private_key: keys.SecretKey, public_key: bytes) -> bytes:
        return private_key.ecdh(public_key) + b"\x00"


class _Backend(DefaultNoiseBackend):
    def __init__(self) -> None:
        super().__init__()
        self.diffie_hellmans = {"Secp256k1": Secp256k1}
        self.keypairs = {"Secp256k1": Secp256k1KeyPair}


BACKEND = _Backend()


class ChannelNoise:
    """One channel's Noise KK session. `initiator` opens the channel (OpenChannel carries message 1)."""

    __slots__ = ("_conn", "initiator", "_enc", "_dec", "_sent", "_received", "ready")

    def __init__(self, local: keys.SecretKey, remote: bytes, initiator: bool,
                 ephemeral: bytes | None = None) -> None:
        """`ephemeral` fixes the ephemeral secret key: for test vectors only."""
        conn = NoiseConnection.from_name(PROTOCOL_NAME, backend=BACKEND)
        conn.set_as_initiator() if initiator else conn.set_as_responder()
        conn.set_keypair_from_private_bytes(Keypair.STATIC, local.secret)
        conn.set_keypair_from_public_bytes(Keypair.REMOTE_STATIC, remote)
        if ephemeral is not None:
            conn.set_keypair_from_private_bytes(Keypair.EPHEMERAL, ephemeral)
        with warnings.catch_warnings():  # noiseprotocol warns when a test fixes the ephemeral key
            warnings.simplefilter("ignore")
            conn.start_handshake()
        self._conn = conn
        self.initiator = initiator
        self._sent = self._received = 0
        self.ready = False

    def message1(self) -> bytes:
        """Initiator: `-> e, es, ss`."""
        return bytes(self._conn.write_message())

    def read_message1(self, message: bytes) -> bytes:
        """Responder: read `-> e, es, ss`, return `<- e, ee, se`; the session is then ready."""
        self._read(message)
        out = bytes(self._conn.write_message())
        self._split()
        return out

    def read_message2(self, message: bytes) -> None:
        """Initiator: read `<- e, ee, se`; the session is then ready."""
        self._read(message)
        self._split()

    def _read(self, message: bytes) -> None:
        if len(message) != MESSAGE_LEN:
            raise ChannelError(f"Noise handshake message must be {MESSAGE_LEN} bytes", "noise_length")
        try:
            payload = self._conn.read_message(bytes(message))
        except (InvalidTag, NoiseInvalidMessage) as exc:
            raise ChannelError("Noise handshake message failed authentication", "noise_auth") from exc
        if payload:
            raise ChannelError("Noise handshake message carries a payload", "noise_payload")

    def _split(self) -> None:
        proto = self._conn.noise_protocol
        self._enc, self._dec = proto.cipher_state_encrypt, proto.cipher_state_decrypt
        self.ready = True

    def encrypt(self, plaintext: bytes) -> bytes:
        self._sent += 1
        if self._sent == REKEY_EVERY:
            self._sent = 0
            self._enc.rekey()
        return self._enc.encrypt_with_ad(None, plaintext)

    def decrypt(self, ciphertext: bytes) -> bytes:
        """Raises ChannelError when the tag does not verify; the channel cannot continue after that."""
        self._received += 1
        if self._received == REKEY_EVERY:
            self._received = 0
            self._dec.rekey()
        try:
            return self._dec.decrypt_with_ad(None, ciphertext)
        except InvalidTag as exc:
            raise ChannelError("ciphertext failed authentication", "decrypt") from exc
