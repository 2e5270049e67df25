"""RFC 5705 / RFC 8446 TLS keying-material exporter for Python's ssl module (which lacks one).

iroh clients over TLS may log in with the `x-iroh-relay-client-auth-v1` header: a signature over
an exporter value (label "iroh-relay handshake v1", context = the client's public key, 32 bytes)
that only the two ends of that TLS session can compute. Python's ssl module does not expose
SSL_export_keying_material, so this calls it through ctypes on the `SSL *` inside the SSLObject.

That pointer is found by CPython's layout of the `_ssl._SSLSocket` object (PyObject_HEAD, the
socket weakref, then `SSL *ssl`), which has not changed since Python 3.7 — and is never trusted
blindly: before use, `SSL_get_ex_data(ssl, 0)` must point back at that very `_SSLSocket` object
(CPython stores it there with SSL_set_app_data). `available()` additionally runs a one-off self-check
in a child process first (a wrong guess cannot crash the relay), then in this process: a TLS
handshake over memory BIOs whose client and server must export the same, label- and
context-dependent bytes. If any of it fails the relay keeps using the challenge login, which every
iroh client falls back to.
"""

from __future__ import annotations

import ctypes
import logging
import platform
import ssl
import subprocess
import sys
import tempfile

log = logging.getLogger(__name__)
LABEL = b"iroh-relay handshake v1"
_PTR_SIZE = ctypes.sizeof(ctypes.c_void_p)
_SSL_OFFSET = 3 * _PTR_SIZE  # ob_refcnt, ob_type, Socket weakref, then SSL *ssl

_lib = None
_available: bool | None = None


def _libssl():
    global _lib
    if _lib is None:
        import _ssl

        lib = ctypes.CDLL(_ssl.__file__)  # symbols resolve in the very libssl _ssl is linked with
        lib.SSL_export_keying_material.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                                   ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                                   ctypes.c_size_t, ctypes.c_int]
        lib.SSL_export_keying_material.restype = ctypes.c_int
        lib.SSL_get_ex_data.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.SSL_get_ex_data.restype = ctypes.c_void_p
        _lib = lib
    return _lib


def _ssl_pointer(obj: ssl.SSLObject) -> int | None:
    inner = getattr(obj, "_sslobj", None)
    if inner is None or platform.python_implementation() != "CPython":
        return None
    ptr = ctypes.c_void_p.from_address(id(inner) + _SSL_OFFSET).value
    if not ptr or _libssl().SSL_get_ex_data(ptr, 0) != id(inner):
        return None
    return ptr


def export_keying_material(obj: ssl.SSLObject, label: bytes, context: bytes | None,
                           length: int) -> bytes | None:
    """The exporter value of this TLS session, or None when it cannot be computed."""
    ptr = _ssl_pointer(obj)
    if ptr is None:
        return None
    out = ctypes.create_string_buffer(length)
    ok = _libssl().SSL_export_keying_material(ptr, out, length, label, len(label), context or b"",
                                              len(context or b""), 1 if context is not None else 0)
    return out.raw if ok == 1 else None


def _pump(a_in: ssl.MemoryBIO, a_out: ssl.MemoryBIO, b_in: ssl.MemoryBIO, b_out: ssl.MemoryBIO) -> None:
    if a_out.pending:
        b_in.write(a_out.read())
    if b_out.pending:
        a_in.write(b_out.read())


def self_check() -> bool:
    """A memory-BIO TLS 1.3 and 1.2 handshake with itself: both ends must export equal bytes."""
    from ..tls import generate_self_signed

    with tempfile.TemporaryDirectory() as tmp:
        cert, key = generate_self_signed(tmp)
        for version in (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2):
            sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            sctx.load_cert_chain(cert, key)
            sctx.minimum_version = sctx.maximum_version = version
            cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            cctx.load_verify_locations(cert)
            cctx.minimum_version = cctx.maximum_version = version
            bios = [ssl.MemoryBIO() for _ in range(4)]
            srv = sctx.wrap_bio(bios[0], bios[1], server_side=True)
            cli = cctx.wrap_bio(bios[2], bios[3], server_hostname="localhost")
            done = [False, False]
            for _ in range(10):
                for i, end in enumerate((cli, srv)):
                    if not done[i]:
                        try:
                            end.do_handshake()
                            done[i] = True
                        except ssl.SSLWantReadError:
                            pass
                _pump(bios[2], bios[3], bios[0], bios[1])
                if all(done):
                    break
            if not all(done):
                return False
            ctx_a, ctx_b = b"\x01" * 32, b"\x02" * 32
            s_a = export_keying_material(srv, LABEL, ctx_a, 32)
            c_a = export_keying_material(cli, LABEL, ctx_a, 32)
            s_b = export_keying_material(srv, LABEL, ctx_b, 32)
            c_other = export_keying_material(cli, b"another label", ctx_a, 32)
            if s_a is None or s_a != c_a or s_a == s_b or s_a == c_other or s_a == bytes(32):
                return False
    return True


def available() -> bool:
    """Whether the exporter works here; decided once per process, crash-safe (see module doc)."""
    global _available
    if _available is None:
        _available = False
        try:
            child = subprocess.run(
                [sys.executable, "-c", "import sys; from burrow.packet_relay.iroh.tls_exporter import self_check; "
                                       "sys.exit(0 if self_check() else 1)"],
                capture_output=True, timeout=30, cwd=_package_root())
            _available = child.returncode == 0 and self_check()
        except (OSError, subprocess.SubprocessError, AttributeError, ssl.SSLError) as exc:
            log.info("TLS exporter self-check failed: %s", exc)
        if not _available:
            log.warning("TLS keying-material exporter unavailable; iroh clients use the challenge login")
    return _available


def _package_root() -> str:
    import os

    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
