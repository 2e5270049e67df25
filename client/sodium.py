"""XSalsa20-Poly1305 secretbox for bulk records, from the fastest libsodium build on the machine.

Transit records are sealed with libsodium's secretbox. PyNaCl bundles a portable libsodium build; the
distribution's shared library (Debian `libsodium23`) picks AVX2 code paths at run time and seals about
twice as fast here (1.6 vs 0.8 GB/s for 256 KiB records). Both are the same library and give the same
bytes, so we use the shared one when it loads and passes a known-answer check against PyNaCl, and
PyNaCl's otherwise. `BURROW_SODIUM=bundled` forces PyNaCl's (for comparison or a broken system lib).

Both calls write into caller-given buffers (no intermediate copies) and release the GIL. The shared
library is called through ctypes, with buffer addresses taken by PyNaCl's compiled cffi module: declaring
the functions to cffi instead would parse C at start-up (about 40 ms). The choice is made on first use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

from nacl._sodium import ffi as _bundled_ffi
from nacl._sodium import lib as _bundled_lib

_SONAMES = ("libsodium.so.23", "libsodium.so.26", "libsodium.dylib")


class SecretBoxLib:
    """PyNaCl's bundled build: seal into / open into caller buffers; `name` says which build."""

    name = "PyNaCl bundled libsodium"

    def seal_into(self, out, plaintext, nonce: bytes, key: bytes) -> None:
        """out (writable, len(plaintext) + 16) <- MAC || ciphertext."""
        f = _bundled_ffi
        if _bundled_lib.crypto_secretbox_easy(f.from_buffer(out), f.from_buffer(plaintext), len(plaintext),
                                              nonce, key) != 0:
            raise ValueError("secretbox encryption failed")

    def open_into(self, out, ciphertext, nonce: bytes, key: bytes) -> bool:
        """out (writable, len(ciphertext) - 16) <- plaintext; False if the MAC does not verify."""
        f = _bundled_ffi
        return _bundled_lib.crypto_secretbox_open_easy(f.from_buffer(out), f.from_buffer(ciphertext),
                                                       len(ciphertext), nonce, key) == 0


def _address(pinned) -> int:
    """The address of a buffer pinned by `ffi.from_buffer` (read-only buffers included)."""
    return int(_bundled_ffi.cast("uintptr_t", pinned))


class SystemSecretBox(SecretBoxLib):
    """The machine's shared libsodium through ctypes (which releases the GIL during each call)."""

    def __init__(self, lib: ctypes.CDLL, name: str) -> None:
        self.name = name
        args = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_char_p, ctypes.c_char_p]
        self._seal, self._open = lib.crypto_secretbox_easy, lib.crypto_secretbox_open_easy
        for fn in (self._seal, self._open):
            fn.argtypes, fn.restype = args, ctypes.c_int

    def seal_into(self, out, plaintext, nonce: bytes, key: bytes) -> None:
        pin = _bundled_ffi.from_buffer
        out_pin, in_pin = pin(out), pin(plaintext)  # both stay alive, and pinned, through the call
        if self._seal(_address(out_pin), _address(in_pin), len(plaintext), nonce, key) != 0:
            raise ValueError("secretbox encryption failed")

    def open_into(self, out, ciphertext, nonce: bytes, key: bytes) -> bool:
        pin = _bundled_ffi.from_buffer
        out_pin, in_pin = pin(out), pin(ciphertext)
        return self._open(_address(out_pin), _address(in_pin), len(ciphertext), nonce, key) == 0


BUNDLED = SecretBoxLib()


def _load_system() -> SecretBoxLib | None:
    names = [n for n in (ctypes.util.find_library("sodium"),) if n] + list(_SONAMES)
    for soname in names:
        try:
            lib = ctypes.CDLL(soname)
        except OSError:
            continue
        if lib.sodium_init() < 0:
            continue
        lib.sodium_version_string.restype = ctypes.c_char_p
        version = lib.sodium_version_string().decode()
        return SystemSecretBox(lib, f"system libsodium {version} ({soname})")
    return None


def _agrees(candidate: SecretBoxLib) -> bool:
    """Known-answer check: the candidate seals and opens exactly as PyNaCl's build does."""
    key, nonce, msg = bytes(range(32)), bytes(range(24)), bytes(range(256)) * 5
    a, b = bytearray(len(msg) + 16), bytearray(len(msg) + 16)
    BUNDLED.seal_into(a, msg, nonce, key)
    candidate.seal_into(b, msg, nonce, key)
    back = bytearray(len(msg))
    return a == b and candidate.open_into(back, bytes(a), nonce, key) and back == msg


def choose() -> SecretBoxLib:
    if os.environ.get("BURROW_SODIUM", "").lower() == "bundled":
        return BUNDLED
    try:
        system = _load_system()
    except Exception:  # noqa: BLE001 - any trouble loading a system library means: use the bundled one
        system = None
    return system if system is not None and _agrees(system) else BUNDLED


@functools.cache
def secretbox() -> SecretBoxLib:
    """The build every transit record uses, chosen once per process."""
    return choose()
