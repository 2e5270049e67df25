"""L2 crypto: the Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s session of one connection.

in:  the dilation key, our role (the Leader is the Noise initiator), handshake frames, ciphertext frames
out: handshake messages to frame; record plaintexts; ciphertext frames for outbound records
states: handshake -> transport (a failed message raises NoiseError and the connection is dropped)

A record plaintext longer than one Noise message (65519 bytes) is cut into 65519-byte pieces, each encrypted
on its own, and the ciphertexts are concatenated into ONE frame (magic-wormhole 0.24 does the same); the
receiver decrypts a frame in 65535-byte steps.
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from noise.connection import NoiseConnection
from noise.exceptions import NoiseHandshakeError, NoiseInvalidMessage

from .errors import NoiseError

NOISE_PROTOCOL = b"Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s"
NOISE_MAX_CIPHERTEXT = 65535
NOISE_MAX_PAYLOAD = NOISE_MAX_CIPHERTEXT - 16
_MAX_NONCE = 2**64 - 1
_NONCE = struct.Struct("<4xQ")  # 32 zero bits, then the 64-bit counter little-endian
_LEN = struct.Struct(">L")  # a frame's length prefix


def _sealed_size(plaintext: int) -> int:
    """Bytes of the Noise messages that carry `plaintext` bytes: a 16-byte tag per 65519 bytes or part."""
    return plaintext + 16 * max(1, -(-plaintext // NOISE_MAX_PAYLOAD))


class _Cipher:
    """One direction of the transport phase: ChaCha20-Poly1305 with a little-endian 64-bit counter nonce."""

    __slots__ = ("_aead", "_n")

    def __init__(self, key: bytes, n: int):
        self._aead = ChaCha20Poly1305(key)
        self._n = n

    def _nonce(self) -> bytes:
        if self._n >= _MAX_NONCE:
            raise NoiseError("nonce exhausted")
        n = self._n
        self._n = n + 1
        return _NONCE.pack(n)

    def encrypt(self, plaintext: bytes) -> bytes:
        return self._aead.encrypt(self._nonce(), plaintext, None)

    def decrypt(self, ciphertext: bytes) -> bytes:
        try:
            return self._aead.decrypt(self._nonce(), ciphertext, None)
        except InvalidTag:
            raise NoiseError("bad Noise transport message") from None

    # The *_into forms write into a slice of a caller's buffer: a large record is sealed straight into its
    # frame and opened straight into one plaintext buffer, with no per-piece bytes objects to join.
    def encrypt_into(self, plaintext, out: memoryview) -> None:
        self._aead.encrypt_into(self._nonce(), plaintext, None, out)

    def decrypt_into(self, ciphertext, out: memoryview) -> None:
        try:
            self._aead.decrypt_into(self._nonce(), ciphertext, None, out)
        except InvalidTag:
            raise NoiseError("bad Noise transport message") from None


class NoiseSession:
    def __init__(self, dilation_key: bytes, *, leader: bool):
        self.leader = leader
        self._noise = NoiseConnection.from_name(NOISE_PROTOCOL)
        self._noise.set_psks(dilation_key)
        if leader:
            self._noise.set_as_initiator()
        else:
            self._noise.set_as_responder()
        self._noise.start_handshake()
        self._send: _Cipher | None = None
        self._recv: _Cipher | None = None

    @property
    def ready(self) -> bool:
        return self._send is not None

    def leader_hello(self) -> bytes:
        """Leader: handshake message 1 (-> psk, e)."""
        assert self.leader
        try:
            return self._noise.write_message()
        except NoiseHandshakeError as e:
            raise NoiseError(str(e)) from None

    def leader_finish(self, message2: bytes) -> None:
        """Leader: read handshake message 2 (<- e, ee); transport keys are ready after this."""
        self._read(message2)
        self._start_transport()

    def follower_answer(self, message1: bytes) -> bytes:
        """Follower: read message 1 and return message 2; transport keys are ready after this."""
        assert not self.leader
        self._read(message1)
        try:
            message2 = self._noise.write_message()
        except NoiseHandshakeError as e:
            raise NoiseError(str(e)) from None
        self._start_transport()
        return message2

    def _read(self, message: bytes) -> None:
        try:
            self._noise.read_message(message)  # the optional handshake payload is unused
        except (NoiseInvalidMessage, NoiseHandshakeError, InvalidTag, ValueError) as e:
            raise NoiseError(f"bad Noise handshake: {e!r}") from None

    def _start_transport(self) -> None:
        if not self._noise.handshake_finished:
            raise NoiseError("Noise handshake did not finish")
        proto = self._noise.noise_protocol
        enc, dec = proto.cipher_state_encrypt, proto.cipher_state_decrypt
        self._send = _Cipher(enc.k, enc.n)
        self._recv = _Cipher(dec.k, dec.n)

    def encrypt(self, plaintext: bytes) -> bytes:
        """One record plaintext -> one frame payload (several Noise messages if needed)."""
        assert self._send is not None, "handshake not finished"
        if len(plaintext) <= NOISE_MAX_PAYLOAD:
            return self._send.encrypt(plaintext)
        view = memoryview(plaintext)
        return b"".join(
            self._send.encrypt(view[i : i + NOISE_MAX_PAYLOAD])
            for i in range(0, len(plaintext), NOISE_MAX_PAYLOAD)
        )

    def seal_frames(self, records, out: bytearray | None = None) -> bytearray | memoryview:
        """The frames of encrypt(head + body) for each (head, body), back to back in one buffer (the caller
        hands it to the transport in one write): a 4-byte length, then the Noise messages. The first message
        of each is sealed in place (head and the start of body copied in, then encrypted over themselves), the
        others straight from body: one copy of the payload, no joins. Written into the start of `out` (and a
        view of that returned) when it is large enough, else into a new buffer."""
        assert self._send is not None, "handshake not finished"
        sizes = [n + 16 if n <= NOISE_MAX_PAYLOAD else _sealed_size(n) for n in [len(h) + len(b) for h, b in records]]
        need = 4 * len(sizes) + sum(sizes)
        if out is None or len(out) < need:
            out = bytearray(need)
        view, pos = memoryview(out)[:need], 0
        seal = self._send.encrypt_into
        for (head, body), size in zip(records, sizes, strict=True):
            _LEN.pack_into(out, pos, size)
            pos += 4
            h = len(head)
            end = pos + h + len(body)
            if end - pos <= NOISE_MAX_PAYLOAD:  # one Noise message: every record but an oversized one
                view[pos : pos + h] = head  # into the memoryview: a bytearray slice assignment copies twice
                view[pos + h : end] = body
                seal(view[pos:end], view[pos : end + 16])  # OpenSSL allows in == out
                pos = end + 16
                continue
            src = memoryview(body)
            first = NOISE_MAX_PAYLOAD - h
            n = h + first
            view[pos : pos + h] = head
            view[pos + h : pos + n] = src[:first]
            seal(view[pos : pos + n], view[pos : pos + n + 16])
            pos += n + 16
            for i in range(first, len(body), NOISE_MAX_PAYLOAD):
                piece = src[i : i + NOISE_MAX_PAYLOAD]
                seal(piece, view[pos : pos + len(piece) + 16])
                pos += len(piece) + 16
        return view if len(out) > need else out

    def decrypt(self, payload) -> bytes | memoryview:
        """One frame payload -> the record plaintext. A one-message frame in a writable buffer is opened in
        place and returned as a view of it; a frame of several Noise messages is opened into one new buffer
        and returned as a read-only memoryview of it (no join, no copy)."""
        assert self._recv is not None, "handshake not finished"
        size = len(payload)
        if size <= NOISE_MAX_CIPHERTEXT:
            if isinstance(payload, memoryview) and not payload.readonly and size >= 16:
                plain = payload[:-16]  # opened in place: the plaintext overwrites its ciphertext (OpenSSL allows it)
                self._recv.decrypt_into(payload, plain)
                return plain
            return self._recv.decrypt(payload)
        pieces = -(-size // NOISE_MAX_CIPHERTEXT)
        if size - (pieces - 1) * NOISE_MAX_CIPHERTEXT < 16:  # the last message is shorter than its tag
            raise NoiseError("bad Noise transport message")
        out = memoryview(bytearray(size - 16 * pieces))
        view = memoryview(payload)
        pos = 0
        for i in range(0, size, NOISE_MAX_CIPHERTEXT):
            piece = view[i : i + NOISE_MAX_CIPHERTEXT]
            self._recv.decrypt_into(piece, out[pos : pos + len(piece) - 16])
            pos += len(piece) - 16
        return out.toreadonly()
