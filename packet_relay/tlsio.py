"""TLS over a plain asyncio Protocol with ssl.MemoryBIO.

asyncio's own SSL transport keeps a 256 KiB read buffer per connection (about 170 KB of RSS per
idle connection here); an SSLObject with two memory BIOs costs about 10 KB, which is what lets an
idle DERP client stay under 20 KB.
"""

from __future__ import annotations

import ssl

READ_CHUNK = 64 * 1024


class TLSError(Exception):
    pass


class TLSSession:
    __slots__ = ("_in", "_out", "_obj", "handshaken", "version", "peer_closed")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=True)
        self.handshaken = False
        self.version: str | None = None
        self.peer_closed = False

    def receive(self, data: bytes) -> tuple[bytes, bytes]:
        """Ciphertext in -> (plaintext for the application, ciphertext to send back).

        Reading stops as soon as no whole record can be left (nothing in the incoming BIO and nothing
        buffered in the SSL object) instead of reading until OpenSSL raises "want read": one socket read
        usually holds whole records, and that last failing read costs about a third of decrypting a
        10 kB record."""
        obj, incoming = self._obj, self._in
        incoming.write(data)
        plain = b""
        chunks: list[bytes] = []
        try:
            if not self.handshaken:
                obj.do_handshake()
                self.handshaken = True
                self.version = obj.version()
            while True:
                chunk = obj.read(READ_CHUNK)
                if not chunk:
                    self.peer_closed = True
                    break
                chunks.append(chunk)
                if not incoming.pending and not obj.pending():
                    break
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass  # need more bytes
        except ssl.SSLZeroReturnError:
            self.peer_closed = True  # close_notify: keep what was read, then close
        except ssl.SSLError as exc:
            raise TLSError(str(exc)) from exc
        if chunks:
            plain = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return plain, self._out.read() if self._out.pending else b""

    def encrypt(self, data: bytes) -> bytes:
        try:
            self._obj.write(data)
        except ssl.SSLError as exc:
            raise TLSError(str(exc)) from exc
        return self._out.read()

    def close_notify(self) -> bytes:
        try:
            self._obj.unwrap()
        except ssl.SSLError:
            pass
        return self._out.read() if self._out.pending else b""
