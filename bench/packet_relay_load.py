"""The forwarding load both relay benchmarks share (bench/packet_relay.py: DERP, bench/packet_relay_iroh.py:
iroh): blocking TLS sockets, one thread each (OpenSSL runs without the GIL, so the generator keeps up)."""

from __future__ import annotations

import threading
import time

import psutil


def pump(senders: list, receivers: list, blobs: list[bytes], rounds: int, want: int, relay_pid: int | list[int],
         idle: float = 1.0) -> tuple[list[int], float, float]:
    """Sender i writes blobs[i] `rounds` times while receiver i counts bytes until `want` arrived or
    `idle` seconds passed without any (the rest was dropped). Closes every socket. Returns (bytes received per
    pair, seconds until the last byte arrived, relay CPU seconds (user+system) meanwhile, summed over every
    relay process when given several: the nodes of a mesh)."""
    pairs = len(senders)
    received = [0] * pairs
    last_rx = [0.0] * pairs

    def send(i: int) -> None:
        for _ in range(rounds):
            senders[i].sendall(blobs[i])

    def recv(i: int) -> None:
        sock = receivers[i]
        sock.settimeout(idle)
        got = 0
        buf = bytearray(1 << 20)
        while got < want:
            try:
                n = sock.recv_into(buf)
            except TimeoutError:
                break  # the rest was dropped
            if not n:
                break
            got += n
            last_rx[i] = time.perf_counter()
        received[i] = got

    relays = [psutil.Process(pid) for pid in (relay_pid if isinstance(relay_pid, list) else [relay_pid])]

    def relay_cpu() -> float:
        return sum(sum(r.cpu_times()[:2]) for r in relays)

    cpu0 = relay_cpu()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=recv, args=(i,)) for i in range(pairs)]
    threads += [threading.Thread(target=send, args=(i,)) for i in range(pairs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = max(max(last_rx) - t0, 1e-9)
    cpu = relay_cpu() - cpu0
    for sock in (*senders, *receivers):
        sock.close()
    return received, elapsed, cpu
