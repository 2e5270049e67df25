"""A magic-wormhole 0.24 Dilation peer for interop tests and the bench (runs in its own process, Twisted).

usage: python mw_dilation_peer.py RELAY_URL TRANSIT [--code CODE] [--no-listen] [--ping-interval S]
       [--listen NAME]... [--open NAME:SIZE[:COUNT]]... [--expect N] [--stay S] [--log FILE] [--no-hash]

Prints one line per event on stdout: `code <code>`, `status <peer-connection> <hint>`, `sent <name> <n>
<sha256>`, `received <name> <n> <sha256>`, `done`. App protocol on every subchannel: an 8-byte big-endian
length, then that many bytes; the receiver answers with the 64 hex digits of their SHA-256 and closes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import struct
import sys

import wormhole
from twisted.internet import defer, protocol, task
from twisted.internet.interfaces import IPullProducer
from zope.interface import implementer

APPID = "lothar.com/wormhole/text-or-file-xfer"
BLOCK = os.urandom(256 * 1024)
RECEIVED: list[str] = []
HASH = True  # --no-hash (bench): count bytes only, digests are all zeros


def say(*parts) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


class Sink(protocol.Protocol):
    """Receives one length-prefixed blob, answers its SHA-256."""

    def connectionMade(self):
        self.buf, self.want, self.got, self.h = b"", None, 0, hashlib.sha256()

    def dataReceived(self, data):
        if self.want is None:
            self.buf += data
            if len(self.buf) < 8:
                return
            (self.want,), data = struct.unpack(">Q", self.buf[:8]), self.buf[8:]
        self.got += len(data)
        if HASH:
            self.h.update(data)
        if self.got >= self.want:
            digest = self.h.hexdigest() if HASH else "0" * 64
            say("received", self.factory.name, self.got, digest)
            RECEIVED.append(digest)
            self.transport.write(digest.encode())
            self.transport.loseConnection()


@implementer(IPullProducer)
class Source(protocol.Protocol):
    """Sends SIZE bytes with a pull producer, then waits for the peer's digest."""

    def connectionMade(self):
        self.left, self.h, self.answer = self.factory.size, hashlib.sha256(), b""
        self.transport.write(struct.pack(">Q", self.left))
        self.transport.registerProducer(self, False)

    def resumeProducing(self):
        if self.left <= 0:
            return
        chunk = BLOCK[: min(len(BLOCK), self.left)]
        self.left -= len(chunk)
        if HASH:
            self.h.update(chunk)
        self.transport.write(chunk)
        if self.left <= 0:
            self.transport.unregisterProducer()
            say("sent", self.factory.name, self.factory.size, self.h.hexdigest() if HASH else "0" * 64)

    def stopProducing(self):
        pass

    def dataReceived(self, data):
        self.answer += data
        if len(self.answer) >= 64:
            say("answer", self.factory.name, self.answer[:64].decode())
            self.transport.loseConnection()
            self.factory.done.callback(None)


@defer.inlineCallbacks
def main(reactor, args):
    w = wormhole.create(APPID, args.relay_url, reactor, dilation=True)
    if args.code:
        w.set_code(args.code)
    else:
        w.allocate_code()
        say("code", (yield w.get_code()))

    def on_status(st):
        pc = st.peer_connection
        say("status", type(pc).__name__, getattr(pc, "hint_description", "-"))

    dw = w.dilate(transit_relay_location=args.transit, no_listen=args.no_listen, on_status_update=on_status,
                  ping_interval=args.ping_interval)
    for name in args.listen:
        f = protocol.Factory.forProtocol(Sink)
        f.name = name
        yield dw.listener_for(name).listen(f)
    yield dw.when_dilated()
    say("dilated")
    waits = []
    for spec in args.open:
        name, size, *count = spec.split(":")
        for i in range(int(count[0]) if count else 1):
            f = protocol.Factory.forProtocol(Source)
            f.name, f.size, f.done = f"{name}#{i}", int(size), defer.Deferred()
            yield dw.connector_for(name).connect(f)
            waits.append(f.done)
    yield defer.gatherResults(waits)
    while len(RECEIVED) < args.expect:
        yield task.deferLater(reactor, 0.05, lambda: None)
    if args.stay:
        yield task.deferLater(reactor, args.stay, lambda: None)
    say("done")
    try:
        yield w.close()
    except Exception as e:  # the peer may have closed first
        say("close", type(e).__name__)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("relay_url")
    ap.add_argument("transit")
    ap.add_argument("--code")
    ap.add_argument("--no-listen", action="store_true")
    ap.add_argument("--ping-interval", type=float, default=None)
    ap.add_argument("--listen", action="append", default=[])
    ap.add_argument("--open", action="append", default=[])
    ap.add_argument("--stay", type=float, default=0.0)
    ap.add_argument("--expect", type=int, default=0, help="blobs to receive before finishing")
    ap.add_argument("--log", help="write Twisted's log to this file")
    ap.add_argument("--no-hash", action="store_true", help="skip SHA-256 (benchmarks)")
    a = ap.parse_args()
    HASH = not a.no_hash
    if a.log:
        from twisted.python import log

        log.startLogging(open(a.log, "a"), setStdout=False)  # noqa: SIM115 (lives as long as the process)
    task.react(main, [a])
