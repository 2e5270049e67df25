"""The packet relay's CPU per forwarded packet at a fixed rate, not at saturation (bench/packet_relay.py).

`pairs` DERP senders each send 1200-byte packets to their own receiver at `rate` packets/s (bursts of
BURST on an absolute schedule, so a late burst does not lower the rate), for `seconds`. The relay's CPU
(user + system, psutil) over that window divided by the packets delivered is the figure: what one
forwarded packet costs the relay when it is not busy enough to batch many packets per wake-up. The
relay's voluntary context switches over the window count its wake-ups: how many packets one carried
depends on how evenly the load generator keeps its schedule, so the figure is read together with it; both
processes run at real-time priority over the window where allowed (see realtime()).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

import psutil

BURST = 8  # packets per write: 6000 packets/s per pair is a burst every 1.3 ms
RT_PRIORITY = 50


@contextlib.contextmanager
def realtime(relay_pid: int):
    """Run the relay and this load generator at real-time priority (SCHED_FIFO) for the paced window, so other
    work on the machine neither delays the bursts nor the relay's wake-ups: a busy machine then gives the
    relay the wake-ups an idle one would instead of bunching them. Yields whether it could (root or
    CAP_SYS_NICE); without it the run goes on at normal priority."""
    tids = [int(t) for t in os.listdir(f"/proc/{relay_pid}/task")] if hasattr(os, "sched_setscheduler") else []
    done: list[int] = []
    try:
        for tid in [0, *tids]:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
            done.append(tid)
    except (PermissionError, ProcessLookupError, OSError):
        pass
    try:
        yield bool(tids) and len(done) == len(tids) + 1
    finally:
        for tid in done:
            with contextlib.suppress(OSError):
                os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))


async def paced_cpu(connect, burst_to, frame_size: int, relay_pid: int, pairs: int = 4, rate: int = 6000,
                    seconds: float = 5.0) -> dict:
    """`connect()` opens one DERP client (with `.reader`, `.writer`, `.key`); `burst_to(key)` is BURST
    SendPacket frames to that key; a receiver gets `frame_size` bytes per packet."""
    conns = [await connect() for _ in range(2 * pairs)]
    senders, receivers = conns[:pairs], conns[pairs:]
    received = [0] * pairs
    stop = asyncio.Event()

    async def send(i: int) -> int:
        blob = burst_to(receivers[i].key)
        w = senders[i].writer
        start = time.monotonic()
        sent = 0
        while sent < rate * seconds:
            w.write(blob)
            sent += BURST
            await w.drain()
            delay = start + sent / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        return sent

    async def sink(i: int) -> None:
        r = receivers[i].reader
        while not stop.is_set():
            data = await r.read(1 << 20)
            if not data:
                return
            received[i] += len(data)

    proc = psutil.Process(relay_pid)
    sinks = [asyncio.create_task(sink(i)) for i in range(pairs)]
    await asyncio.sleep(0.2)
    with realtime(relay_pid) as rt:
        t0, c0, w0 = time.monotonic(), sum(proc.cpu_times()[:2]), proc.num_ctx_switches().voluntary
        sent = sum(await asyncio.gather(*(send(i) for i in range(pairs))))
        expected = sent * frame_size
        deadline = time.monotonic() + 5  # bounded wait for the last packets
        while sum(received) < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        elapsed, cpu = time.monotonic() - t0, sum(proc.cpu_times()[:2]) - c0
        wakeups = proc.num_ctx_switches().voluntary - w0  # each time the relay slept in its poll and woke again
    stop.set()
    for t in sinks:
        t.cancel()
    await asyncio.gather(*sinks, return_exceptions=True)
    for c in conns:
        c.writer.close()
    delivered = sum(received) // frame_size
    return {"pairs": pairs, "rate_per_pair": rate, "sent": sent, "delivered": delivered,
            "pps": delivered / elapsed, "relay_cpu_pct": 100.0 * cpu / elapsed,
            "us_per_packet": cpu / max(delivered, 1) * 1e6, "wakeups": wakeups,
            "packets_per_wakeup": delivered / max(wakeups, 1), "realtime": rt}


async def lockstep_cpu(connect, burst_to, frame_size: int, relay_pid: int, pairs: int = 4, rounds: int = 3000) -> dict:
    """The paced load's wake-up structure without its timing: each round every sender writes one burst of
    BURST, then every receiver reads its burst before the next round, so each round is one relay wake-up
    carrying pairs x BURST packets whatever else the machine runs (a paced run on a busy machine bunches its
    bursts and reads lower). Relay CPU per packet over the rounds."""
    conns = [await connect() for _ in range(2 * pairs)]
    senders, receivers = conns[:pairs], conns[pairs:]
    blobs = [burst_to(r.key) for r in receivers]
    need = BURST * frame_size
    proc = psutil.Process(relay_pid)

    async def one_round() -> None:
        for s, blob in zip(senders, blobs, strict=True):
            s.writer.write(blob)
        for r in receivers:
            await asyncio.wait_for(r.reader.readexactly(need), 10)

    for _ in range(100):  # warm-up
        await one_round()
    c0, w0 = sum(proc.cpu_times()[:2]), proc.num_ctx_switches().voluntary
    for _ in range(rounds):
        await one_round()
    cpu, wakeups = sum(proc.cpu_times()[:2]) - c0, proc.num_ctx_switches().voluntary - w0
    for c in conns:
        c.writer.close()
    n = rounds * pairs * BURST
    return {"pairs": pairs, "rounds": rounds, "packets": n, "us_per_packet": cpu / n * 1e6,
            "packets_per_wakeup": n / max(wakeups, 1)}
