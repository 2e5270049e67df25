"""The cipher-only stream for a transfer benchmark: what two processes on the same machine move when they do
nothing but what the wire format makes every implementation do.

`--cipher noise` (default, for bench/dilation.py) lays records out as Dilation's; `--cipher secretbox` (for
bench/transfer.py) as classic Transit's: RECORD_SIZE-byte plaintexts (client/apps/transfer.py), each sealed
with XSalsa20-Poly1305 (the client's own libsodium binding) behind a 4-byte length and a 24-byte nonce.

Records are laid out as burrow's DATA records are (client/dilation/runtime.py): MAX_RECORD_PAYLOAD bytes plus the
9-byte header, sealed as Noise messages of at most 65519 bytes with ChaCha20-Poly1305 and counter nonces,
each prefixed with a 4-byte length, SEAL_BATCH frames per send; the receiver reads whole frames and opens
every message into a plaintext buffer. No handshake, no record codec, no ACKs, no sequence numbers, no
subchannels: every protocol cost is zero. It is a yardstick for what the cipher and the path allow, not a
hard ceiling: it is one blocking thread per side, and a client that overlaps its work differently can edge
past it (burrow did in two direct runs). Used by bench/dilation.py (the "cipher-only" column).

The floor of a classic file transfer (bench/transfer.py's "floor" row) is the secretbox stream with
`--file` on the sender (each record's plaintext read from the file) and `--out` on the receiver (each
opened record hashed with SHA-256, which the receiver's acknowledgement carries, and written to a file):
the least work a sender and receiver do when the sender checks the receiver's digest (wormhole-william's
does), still one blocking thread per side. `--out DST --no-hash` is the floor between burrow peers, whose
sender needs no digest: read, seal, send, receive, open, write.

    python bench/cipher_only.py recv (--transit tcp:HOST:PORT | --listen) --bytes N [--cipher secretbox]
        # prints "port P", then "received N SECONDS"
    python bench/cipher_only.py send (--transit tcp:HOST:PORT | --connect HOST:PORT) --bytes N [--cipher secretbox]
        [--file SRC]     # and recv [--out DST [--no-hash]]: the floor
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import socket
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# the client's own transport cipher (ChaCha20-Poly1305, counter nonces) and record layout, so both sides make
# the same calls on the same lengths as burrow
from burrow.client.apps.transfer import RECORD_SIZE  # noqa: E402
from burrow.client.dilation.l2protocol import SEAL_BATCH as BATCH  # noqa: E402
from burrow.client.dilation.noise import NOISE_MAX_PAYLOAD as PIECE  # noqa: E402
from burrow.client.dilation.noise import _Cipher  # noqa: E402
from burrow.client.dilation.runtime import MAX_RECORD_PAYLOAD as PAYLOAD  # noqa: E402
from burrow.client.sodium import secretbox  # noqa: E402

RECORD = 9 + PAYLOAD  # plaintext bytes per record: DATA header and payload
PIECES = -(-RECORD // PIECE)
FRAME = 4 + RECORD + 16 * PIECES
KEY = bytes(range(32))
TOKEN = b"c1" * 32  # one fixed relay token: one cipher-only pair at a time


def _relay(transit: str, side: bytes) -> socket.socket:
    _, host, port = transit.split(":")
    s = socket.create_connection((host, int(port)))
    s.sendall(b"please relay " + TOKEN + b" for side " + side + b"\n")
    reply = b""
    while len(reply) < 3 and (more := s.recv(3 - len(reply))):  # exactly 3: data follows at once
        reply += more
    if reply != b"ok\n":
        raise SystemExit(f"the transit relay did not pair the cipher-only connections: {reply!r}")
    return s


def batches(total: int) -> int:
    """Both sides move whole batches: the sender's last one is never cut off by the receiver closing."""
    return -(-total // (BATCH * PAYLOAD))


def send(s: socket.socket, total: int) -> None:
    seal, plain = _Cipher(KEY, 0), os.urandom(RECORD)
    frames = bytearray(BATCH * FRAME)
    view = memoryview(frames)
    for i in range(BATCH):
        struct.pack_into(">I", frames, i * FRAME, FRAME - 4)
    for _ in range(batches(total)):
        pos = 0
        for _ in range(BATCH):
            pos += 4
            for src in range(0, RECORD, PIECE):
                piece = plain[src:src + PIECE]
                seal.encrypt_into(piece, view[pos:pos + len(piece) + 16])
                pos += len(piece) + 16
        s.sendall(view)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)  # the receiver closes once it has everything


def receive(s: socket.socket, total: int) -> tuple[int, float]:
    """Returns the bytes opened and the seconds from the first byte to the last record opened."""
    opener = _Cipher(KEY, 0)
    buf, out = bytearray(1 << 20), bytearray(RECORD)
    view, oview = memoryview(buf), memoryview(out)
    have = got = 0
    total = batches(total) * BATCH * PAYLOAD
    t0 = None
    while got < total:
        k = s.recv_into(view[have:])
        if not k:
            raise SystemExit(f"stream ended after {got} of {total} bytes")
        t0 = t0 or time.perf_counter()
        have += k
        start = 0
        while have - start >= FRAME:
            (length,) = struct.unpack_from(">I", buf, start)
            assert length == FRAME - 4, "bad frame length"
            pos, dst = start + 4, 0
            while dst < RECORD:
                take = min(PIECE, RECORD - dst)
                opener.decrypt_into(view[pos:pos + take + 16], oview[dst:dst + take])
                pos, dst = pos + take + 16, dst + take
            start += FRAME
            got += PAYLOAD
        if start:
            view[:have - start] = view[start:have]
            have -= start
    return got, time.perf_counter() - t0


def send_secretbox(s: socket.socket, total: int, source: str | None = None) -> None:
    """Classic Transit's records: length, nonce, MAC and ciphertext, one sendall each.

    With `source`, each record's plaintext is read from that file (the floor: what any sender must do)."""
    box, plain = secretbox(), os.urandom(RECORD_SIZE)
    frame = bytearray(4 + 24 + 16 + RECORD_SIZE)
    struct.pack_into(">I", frame, 0, len(frame) - 4)
    view = memoryview(frame)
    f = open(source, "rb", buffering=0) if source else None  # noqa: SIM115
    for n in range(-(-total // RECORD_SIZE)):
        nonce = n.to_bytes(24, "big")
        view[4:28] = nonce
        if f is not None:
            f.readinto(view[44:])
            box.seal_into(view[28:], view[44:], nonce, KEY)
        else:
            box.seal_into(view[28:], plain, nonce, KEY)
        s.sendall(view)
    s.shutdown(socket.SHUT_WR)
    s.recv(1)


def receive_secretbox(s: socket.socket, total: int, out_path: str | None = None, sha256: bool = True
                      ) -> tuple[int, float]:
    """With `out_path`, each record's plaintext is also hashed (SHA-256, unless `sha256` is false) and written
    to that file."""
    box, frame_len = secretbox(), 4 + 24 + 16 + RECORD_SIZE
    buf, out = bytearray(frame_len), bytearray(RECORD_SIZE)
    view = memoryview(buf)
    f = open(out_path, "wb", buffering=0) if out_path else None  # noqa: SIM115
    hasher = hashlib.sha256()
    records, got, t0 = -(-total // RECORD_SIZE), 0, None
    for _ in range(records):
        have = 0
        while have < frame_len:
            k = s.recv_into(view[have:])
            if not k:
                raise SystemExit(f"stream ended after {got} bytes")
            t0 = t0 or time.perf_counter()
            have += k
        if not box.open_into(out, view[28:], bytes(view[4:28]), KEY):
            raise SystemExit("a record failed to authenticate")
        if f is not None:
            if sha256:
                hasher.update(out)
            f.write(out)
        got += RECORD_SIZE
    return got, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", choices=["send", "recv"])
    ap.add_argument("--transit", help="tcp:HOST:PORT of a transit relay")
    ap.add_argument("--listen", action="store_true", help="recv: accept one direct connection")
    ap.add_argument("--connect", help="send: HOST:PORT of a listening receiver")
    ap.add_argument("--bytes", type=int, required=True, help="rounded up to whole batches of records")
    ap.add_argument("--cipher", choices=["noise", "secretbox"], default="noise",
                    help="Dilation's records (noise) or classic Transit's (secretbox)")
    ap.add_argument("--file", help="secretbox send: read the records' plaintext from this file (whole records)")
    ap.add_argument("--out", help="secretbox recv: hash the plaintext with SHA-256 and write it to this file")
    ap.add_argument("--no-hash", action="store_true", help="with --out: write without hashing")
    a = ap.parse_args()
    recv_fn, send_fn = (receive, send) if a.cipher == "noise" else (receive_secretbox, send_secretbox)
    if a.file:
        send_fn = functools.partial(send_secretbox, source=a.file)
    if a.out:
        recv_fn = functools.partial(receive_secretbox, out_path=a.out, sha256=not a.no_hash)
    if a.role == "recv":
        if a.listen:
            ls = socket.create_server(("127.0.0.1", 0))
            print(f"port {ls.getsockname()[1]}", flush=True)
            s = ls.accept()[0]
        else:
            print("port 0", flush=True)
            s = _relay(a.transit, b"f100000000000002")
        got, seconds = recv_fn(s, a.bytes)
        print(f"received {got} {seconds:.6f}", flush=True)
        s.close()
    else:
        if a.connect:
            host, port = a.connect.rsplit(":", 1)
            s = socket.create_connection((host, int(port)))
        else:
            s = _relay(a.transit, b"f100000000000001")
        send_fn(s, a.bytes)


if __name__ == "__main__":
    sys.exit(main())
