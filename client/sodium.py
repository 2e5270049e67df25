"""XSalsa20-Poly1305 secretbox for bulk records, from the fastest libsodium build on the machine.

Transit records are sealed with libsodium's secretbox. PyNaCl bundles a portable libsodium build; the
distribution's shared library (Debian `libsodium23`) picks AVX2 code paths at run time and seals about
twice as fast here (1.6 vs 0.8 GB/s for 256 KiB records). Both are the same library and give the same
bytes, so we use the shared one when it loads and passes a known-answer check against PyNaCl, and
PyNaCl's otherwise. `BURROW_SODIUM=bundled` forces PyNaCl's (for comparison or a broken system lib).

Both calls write into caller-given buffers (no intermediate copies) and release the GIL (cffi does).
The choice is made on first use (`secretbox()`), not at import: loading a library through cffi parses C
declarations, which a text transfer, which never opens a transit connection, need not pay for.
"""

from __future__ import annotations

import ctypes.util
import functools
import os

from nacl._sodium import ffi as _bundled_ffi
from nacl._sodium import lib as _bundled_lib

_CDEF = """
int sodium_init(void);
const char *sodium_version_string(void);
int crypto_secretbox_easy(unsigned char *c, const unsigned char *m, unsigned long long mlen,
                          const unsigned char *n, const unsigned char *k);
int crypto_secretbox_open_easy(unsigned char *m, const unsigned char *c, unsigned long long clen,
                               const unsigned char *n, const unsigned char *k);
"""
_SONAMES = ("libsodium.so.23", "libsodium.so.26", "libsodium.dylib")


class SecretBoxLib:
    """One libsodium binding: seal into / open into caller buffers; `name` says which build."""

    def __init__(self, ffi, lib, name: str):
        self._ffi, self._lib, self.name = ffi, lib, name

    def seal_into(self, out, plaintext, nonce: bytes, key: bytes) -> None:
        """out (writable, len(plaintext) + 16) <- MAC || ciphertext."""
        f = self._ffi
        if self._lib.crypto_secretbox_easy(f.from_buffer(out), f.from_buffer(plaintext), len(plaintext),
                                           nonce, key) != 0:
            raise ValueError("secretbox encryption failed")

    def open_into(self, out, ciphertext, nonce: bytes, key: bytes) -> bool:
        """out (writable, len(ciphertext) - 16) <- plaintext; False if the MAC does not verify."""
        f = self._ffi
        return self._lib.crypto_secretbox_open_easy(f.from_buffer(out), f.from_buffer(ciphertext),
                                                    len(ciphertext), nonce, key) == 0


BUNDLED = SecretBoxLib(_bundled_ffi, _bundled_lib, "PyNaCl bundled libsodium")


def _load_system() -> SecretBoxLib | None:
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    names = [n for n in (ctypes.util.find_library("sodium"),) if n] + list(_SONAMES)
    for soname in names:
        try:
            lib = ffi.dlopen(soname)
        except OSError:
            continue
        if lib.sodium_init() < 0:
            continue
        version = ffi.string(lib.sodium_version_string()).decode()
        return SecretBoxLib(ffi, lib, f"system libsodium {version} ({soname})")
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
