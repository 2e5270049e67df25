"""Byte pumps between two paired TCP sockets.

On Linux each direction moves data socket -> pipe -> socket with splice(2): the payload never enters
user space. A pair starts on non-blocking splice from event-loop readiness callbacks; once it has
moved `--splice-threads-after` bytes (and while fewer than `--splice-threads` pairs have them) it moves
to two threads (one per direction) making blocking splice calls, which release the GIL: no event-loop
wake-up or epoll change per chunk, and one call takes everything the socket holds. Starting a thread
costs more than a short transfer saves, hence the threshold. Elsewhere (or with `--no-splice`) a
direction reads into a buffer shared by all pairs and sends at once, keeping only what the destination
could not take yet. Each way a direction stops reading while its destination cannot take more, so a
slow reader throttles its writer and the relay holds at most one pipe (or one buffer's worth) per
direction.

Half-close is passed through: EOF from A becomes shutdown(SHUT_WR) on B; both sockets are closed when
both directions have ended. Any socket error ends the pair at once (both closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
import threading
from collections.abc import Callable

from burrow.transit_relay.interfaces import ByteCounts

HAVE_SPLICE = hasattr(os, "splice") and hasattr(os, "SPLICE_F_NONBLOCK")
_SPLICE_FLAGS = (os.SPLICE_F_NONBLOCK | os.SPLICE_F_MOVE) if HAVE_SPLICE else 0
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
NEVER = 1 << 62  # a byte count no pair reaches
_ROUNDS = 4  # pipe-loads moved per readiness callback before yielding to other pairs (fairness)


class PipePool:
    """Reuses pipes: a direction holds one only while data sits in it (or it is being read into)."""

    def __init__(self, size: int, max_idle: int = 64) -> None:
        self.wanted = size
        self.max_idle = max_idle
        self._idle: list[tuple[int, int, int]] = []
        self.in_use = 0

    def get(self) -> tuple[int, int, int]:
        self.in_use += 1
        if self._idle:
            return self._idle.pop()
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            size = fcntl.fcntl(w, _F_SETPIPE_SZ, self.wanted)
        except OSError:  # over the per-user pipe quota: keep the kernel's default size
            size = 65536
        return r, w, size

    def put(self, pipe: tuple[int, int, int], empty: bool) -> None:
        self.in_use -= 1
        if empty and len(self._idle) < self.max_idle:
            self._idle.append(pipe)
        else:
            os.close(pipe[0])
            os.close(pipe[1])

    def close(self) -> None:
        for r, w, _ in self._idle:
            os.close(r)
            os.close(w)
        self._idle.clear()


class _Direction:
    """src -> dst. Reads only while nothing is waiting for dst; `held` is what the relay buffers."""

    def __init__(self, fwd: TcpPairForwarder, src: socket.socket, dst: socket.socket, first: bool) -> None:
        self.fwd = fwd
        self.loop = fwd.loop
        self.src, self.dst = src, dst
        self.src_fd, self.dst_fd = src.fileno(), dst.fileno()
        self.first = first  # counts into bytes_from_first
        self.held = 0
        self.done = False
        self.eof = False
        self.running = False  # (pump threads only)

    def start(self) -> None:
        self.loop.add_reader(self.src_fd, self._readable)

    def _count(self, n: int) -> None:
        if self.first:
            self.fwd.pair.bytes_from_first += n
        else:
            self.fwd.pair.bytes_from_second += n

    def _readable(self) -> None:
        try:
            for _ in range(_ROUNDS):
                got = self._read()
                if got == 0:
                    self.eof = True
                    break
                if got < 0 or not self._flush():
                    break
                if got < self.chunk:
                    break
        except OSError:
            self.fwd.abort()
            return
        if self.held:  # destination is full: stop reading until it drains
            self.loop.remove_reader(self.src_fd)
            self.loop.add_writer(self.dst_fd, self._writable)
        elif self.eof:
            self._finish()
        self._idle()
        if self.fwd.pair.total >= self.fwd.threads_at:
            self.fwd.to_threads()

    def _writable(self) -> None:
        try:
            if not self._flush():
                return
        except OSError:
            self.fwd.abort()
            return
        self.loop.remove_writer(self.dst_fd)
        self._idle()
        if self.eof:
            self._finish()
        else:
            self.loop.add_reader(self.src_fd, self._readable)

    def _finish(self) -> None:
        self.loop.remove_reader(self.src_fd)
        self.done = True
        try:
            self.dst.shutdown(socket.SHUT_WR)  # pass the half-close on
        except OSError:
            pass
        self.fwd.direction_done()

    def stop(self) -> None:
        self.loop.remove_reader(self.src_fd)
        self.loop.remove_writer(self.dst_fd)
        self.release()

    # subclasses: chunk, _read() -> bytes read (0 = EOF, -1 = nothing yet), _flush() -> drained?
    chunk = 0

    def _read(self) -> int:
        raise NotImplementedError

    def _flush(self) -> bool:
        raise NotImplementedError

    def _idle(self) -> None:
        """Called when a callback ends; may give resources back."""

    def release(self) -> None:
        """Free buffers when the pair ends."""


class _SpliceDirection(_Direction):
    def __init__(self, *args, pool: PipePool) -> None:
        super().__init__(*args)
        self.pool = pool
        self.pipe: tuple[int, int, int] | None = None
        self.chunk = pool.wanted

    def _read(self) -> int:
        if self.pipe is None:
            self.pipe = self.pool.get()
            self.chunk = self.pipe[2]
        try:
            n = os.splice(self.src_fd, self.pipe[1], self.chunk, flags=_SPLICE_FLAGS)
        except BlockingIOError:
            return -1
        self.held += n
        return n

    def _flush(self) -> bool:
        pipe_r = self.pipe[0] if self.pipe else -1
        while self.held:
            try:
                n = os.splice(pipe_r, self.dst_fd, self.held, flags=_SPLICE_FLAGS)
            except BlockingIOError:
                return False
            self.held -= n
            self._count(n)
        return True

    def _idle(self) -> None:
        if self.pipe is not None and not self.held:
            self.pool.put(self.pipe, empty=True)
            self.pipe = None

    def release(self) -> None:
        if self.pipe is not None:
            self.pool.put(self.pipe, empty=not self.held)
            self.pipe = None
            self.fwd.dropped += self.held
            self.held = 0


class _CopyDirection(_Direction):
    """recv_into one buffer shared by all pairs of the loop, send at once; only a remainder the
    destination could not take is copied out and kept, so idle pairs hold no buffer at all."""

    def __init__(self, *args, shared: memoryview) -> None:
        super().__init__(*args)
        self.shared = shared
        self.chunk = len(shared)
        self.pending: memoryview | None = None

    def _read(self) -> int:
        try:
            n = self.src.recv_into(self.shared)
        except BlockingIOError:
            return -1
        self.pending, self.held = self.shared[:n], n
        return n

    def _flush(self) -> bool:
        while self.held:
            try:
                n = self.dst.send(self.pending)
            except BlockingIOError:
                if self.pending.obj is self.shared.obj:  # the next read would overwrite it
                    self.pending = memoryview(bytes(self.pending))
                return False
            self.pending = self.pending[n:]
            self.held -= n
            self._count(n)
        self.pending = None
        return True

    def release(self) -> None:
        self.fwd.dropped += self.held
        self.held = 0
        self.pending = None


class _ThreadDirection:
    """src -> dst in a thread of its own: blocking splice through the direction's own pipe. The sockets
    are blocking; the loop stops a direction by shutting the sockets down, which wakes its splice."""

    def __init__(self, fwd: TcpPairForwarder, src: socket.socket, dst: socket.socket, first: bool,
                 pipe_size: int) -> None:
        self.fwd = fwd
        self.src, self.dst = src, dst
        self.first = first
        self.pipe_size = pipe_size
        self.held = 0
        self.done = False
        self.running = False

    def start(self) -> None:
        self.running = True
        try:
            threading.Thread(target=self._run, name="transit-pump", daemon=True).start()
        except RuntimeError:  # no thread to be had (a process or memory limit): the pair ends
            self.fwd.loop.call_soon(self._ended, False)

    def _run(self) -> None:
        ok = True
        try:
            r, w = os.pipe2(os.O_CLOEXEC)
        except OSError:
            r = w = -1
            ok = False
        try:
            if ok:
                self._pump(r, w)
                self.dst.shutdown(socket.SHUT_WR)  # pass the half-close on
        except OSError:
            ok = False
        finally:
            if r >= 0:
                os.close(r)
                os.close(w)
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process is ending
            self.fwd.loop.call_soon_threadsafe(self._ended, ok)

    def _pump(self, r: int, w: int) -> None:
        try:
            size = fcntl.fcntl(w, _F_SETPIPE_SZ, self.pipe_size)
        except OSError:  # over the per-user pipe quota: keep the kernel's default size
            size = 65536
        src, dst, pair = self.src.fileno(), self.dst.fileno(), self.fwd.pair
        while True:
            n = os.splice(src, w, size, flags=os.SPLICE_F_MOVE)
            if n == 0:
                return
            self.held = n
            while self.held:
                m = os.splice(r, dst, self.held, flags=os.SPLICE_F_MOVE)
                self.held -= m
                if self.first:
                    pair.bytes_from_first += m
                else:
                    pair.bytes_from_second += m

    def _ended(self, ok: bool) -> None:
        self.running = False
        self.done = True
        if ok:
            self.fwd.direction_done()
        else:
            self.fwd.abort()

    def stop(self) -> None:
        for s in (self.src, self.dst):  # wakes a splice blocked on either socket
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def release(self) -> None:
        self.fwd.dropped += self.held
        self.held = 0


class TcpPairForwarder:
    """Relays both directions of a TCP<->TCP pair; calls `on_done()` once both sockets are closed."""

    def __init__(self, loop: asyncio.AbstractEventLoop, a: socket.socket, b: socket.socket,
                 pair: ByteCounts, on_done: Callable[[], None], pool: PipePool | None,
                 shared: memoryview | None = None, threads: Callable[[], bool] | None = None,
                 threads_after: int = 0) -> None:
        """`threads`: asked once the pair has moved `threads_after` bytes; True grants it pump threads
        (asked again at twice the bytes if not)."""
        self.loop = loop
        self.pair = pair
        self.socks = (a, b)
        self.on_done = on_done
        self.closed = False
        self.dropped = 0  # bytes still buffered when an aborted pair was torn down
        self.threaded = False
        self.pool = pool
        self.threads = threads
        self.threads_at = threads_after if threads is not None and pool is not None and HAVE_SPLICE else NEVER
        if pool is not None and HAVE_SPLICE:
            self.dirs = (_SpliceDirection(self, a, b, True, pool=pool),
                         _SpliceDirection(self, b, a, False, pool=pool))
        else:
            shared = shared if shared is not None else memoryview(bytearray(262144))
            self.dirs = (_CopyDirection(self, a, b, True, shared=shared),
                         _CopyDirection(self, b, a, False, shared=shared))

    @property
    def held(self) -> int:
        return sum(d.held for d in self.dirs)

    def start(self) -> None:
        for d in self.dirs:
            d.start()

    def to_threads(self) -> None:
        """Called from a readiness callback: hand both directions to pump threads if both are idle and
        open (nothing in a pipe, no EOF yet) and a thread slot is granted; else ask again later."""
        d1, d2 = self.dirs
        if self.closed or d1.held or d2.held or d1.eof or d2.eof:
            return
        if not self.threads():
            self.threads_at = max(1, 2 * self.pair.total)
            return
        self.threads_at = NEVER
        for d in self.dirs:
            d.stop()
        a, b = self.socks
        a.setblocking(True)
        b.setblocking(True)
        self.threaded = True
        self.dirs = (_ThreadDirection(self, a, b, True, self.pool.wanted),
                     _ThreadDirection(self, b, a, False, self.pool.wanted))
        for d in self.dirs:
            d.start()

    def direction_done(self) -> None:
        if all(d.done for d in self.dirs):
            self._close()

    def abort(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.closed:
            return
        for d in self.dirs:
            d.stop()
        if any(d.running for d in self.dirs):
            return  # a pump thread still uses the sockets: closed once it has ended
        self.closed = True
        if self.threaded:
            for d in self.dirs:
                d.release()
        for s in self.socks:
            s.close()
        self.on_done()
