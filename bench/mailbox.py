#!/usr/bin/env python3
"""Side-by-side benchmark: Burrow's mailbox server vs magic-wormhole-mailbox-server 0.8.0.

Both servers run as subprocesses on 127.0.0.1 with their SQLite database on disk (a temp dir). In each
case N client pairs run the full wormhole client flow (bind, allocate, claim, open, add, receive,
release, close) until `--pairs` pairs or `--seconds` have passed. Saturating cases start the next step
as soon as the reply arrives (closed loop: this measures capacity, and latency there is queueing);
paced cases wait `--think-ms` before each client step, as real clients do (typing a code, PAKE math),
which shows latency at a given number of concurrent pairs. We report pairs/s, p50/p99 add-to-delivery
latency, server CPU per pair (psutil on the server process) and server RSS per idle bound connection.

With `--redis`, Burrow also runs as `--replicas` replicas (e.g. 1,2) sharing one redis-server (AOF,
appendfsync always, as durable as the SQLite default): side A of every pair talks to the first replica
and side B to the last, so with 2 replicas every message crosses replicas through Redis. CPU per pair
is then summed over every replica and redis-server, and split per process in the replica table.

    python bench/mailbox.py [--concurrency 50,200] [--paced 200] [--think-ms 200] [--pairs 600]
                            [--seconds 6] [--idle 1000] [--procs 1] [--only burrow|reference]
                            [--redis --replicas 1,2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: harness/
from mailbox_load import hold_idle, load  # noqa: E402

from harness.ports import free_port, wait_port  # noqa: E402
from harness.redis import RedisServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


ADMIN_PORTS: dict[int, int] = {}  # our server's WebSocket port -> its admin port


def start_ours(tmp: str, *extra: str, name: str = "burrow") -> tuple[subprocess.Popen, int]:
    port = free_port()
    admin = free_port()
    ADMIN_PORTS[port] = admin
    cmd = [sys.executable, "-m", "burrow.mailbox_server", "--host", "127.0.0.1", "--port", str(port),
           "--db", os.path.join(tmp, f"{name}.sqlite"), "--admin-port", str(admin),
           "--max-connections-per-ip", "0", "--max-connections", "0", "--messages-per-second", "0", *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc)
    return proc, port


class Deployment:
    """What one side of the comparison runs: its processes (CPU is summed over them) and the ports of
    side A and side B of each pair."""

    def __init__(self, procs: list[subprocess.Popen], port_a: int, port_b: int, extra_pids: tuple[int, ...] = (),
                 redis: RedisServer | None = None) -> None:
        self.procs, self.port_a, self.port_b, self.redis = procs, port_a, port_b, redis
        self.pids = [p.pid for p in procs] + list(extra_pids)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.redis is not None:
            self.redis.stop()


def deploy(which: str, tmp: str) -> Deployment:
    if which == "burrow":
        proc, port = start_ours(tmp)
        return Deployment([proc], port, port)
    if which == "reference":
        proc, port = start_reference(tmp)
        return Deployment([proc], port, port)
    replicas = int(which.rsplit("x", 1)[1])  # "burrow+redis x2"
    redis = RedisServer(Path(tmp) / f"redis-{replicas}")
    started = [start_ours(tmp, "--redis-url", redis.url, "--replica-id", f"r{i}", name=f"r{replicas}-{i}")
               for i in range(replicas)]
    return Deployment([p for p, _ in started], started[0][1], started[-1][1], (redis.process.pid,), redis)


def start_reference(tmp: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cmd = [str(BIN / "twist"), "wormhole-mailbox", f"--port=tcp:{port}:interface=127.0.0.1",
           f"--channel-db={os.path.join(tmp, 'reference.sqlite')}"]
    proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc)
    return proc, port


def server_latency_buckets(port: int) -> dict[float, float] | None:
    """Our server's own add-to-write histogram (cumulative buckets), read from /metrics."""
    admin = ADMIN_PORTS.get(port)
    if admin is None:
        return None
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("burrow_mailbox_delivery_latency_seconds_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Upper bound of the histogram bucket holding quantile q of the observations between two scrapes."""
    diff = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = diff[-1][1]
    for le, count in diff:
        if total and count >= q * total:
            return le
    return float("nan")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def _load_in_process(port: int, n: int, pairs: int, seconds: float, think: float, port_b: int) -> dict:
    return asyncio.run(load("127.0.0.1", port, n, pairs, seconds, think, port_b))


def parallel_load(pool: ProcessPoolExecutor, procs: int, port: int, n: int, pairs: int, seconds: float,
                  think: float, port_b: int) -> dict:
    """Split N concurrent pairs over `procs` generator processes."""
    shares = [(n // procs + (i < n % procs), pairs // procs + (i < pairs % procs)) for i in range(procs)]
    futures = [pool.submit(_load_in_process, port, c, p, seconds, think, port_b) for c, p in shares if c]
    parts = [f.result() for f in futures]
    return {"pairs": sum(p["pairs"] for p in parts), "failed": sum(p["failed"] for p in parts),
            "seconds": max(p["seconds"] for p in parts), "latencies": [x for p in parts for x in p["latencies"]]}


def cases(args: argparse.Namespace) -> list[tuple[str, int, float]]:
    """(label, concurrent pairs, think seconds): saturating cases, then paced ones."""
    out = [(f"{n} pairs, saturating", n, 0.0) for n in args.levels]
    out += [(f"{n} pairs, paced ({args.think_ms:g} ms think)", n, args.think_ms / 1000) for n in args.paced]
    return out


async def measure(dep: Deployment, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    ps = psutil.Process(dep.pids[0])
    every = [psutil.Process(pid) for pid in dep.pids]
    port, port_b = dep.port_a, dep.port_b
    results: dict[str, dict[str, float]] = {}
    loop = asyncio.get_running_loop()
    procs = args.procs
    # idle memory first, on the fresh process: after a load run the allocator reuses freed memory
    await asyncio.sleep(0.5)
    rss0 = ps.memory_info().rss
    conns = await hold_idle("127.0.0.1", port, args.idle)
    await asyncio.sleep(1.0)
    rss1 = ps.memory_info().rss
    for ws in conns:
        ws.close()
    results["idle"] = {"kib_per_conn": (rss1 - rss0) / args.idle / 1024}
    await asyncio.sleep(1.0)
    with ProcessPoolExecutor(procs) as pool:
        await loop.run_in_executor(None, parallel_load, pool, procs, port, procs * 2, procs * 4, 5, 0.0,
                                   port_b)  # warm-up
        for label, n, think in cases(args):
            c0 = [cpu(p) for p in every]
            h0 = server_latency_buckets(port)
            r = await loop.run_in_executor(None, parallel_load, pool, procs, port, n, args.pairs, args.seconds,
                                           think, port_b)
            each = [cpu(p) - c for p, c in zip(every, c0, strict=True)]
            used = sum(each)
            h1 = server_latency_buckets(port)
            done = max(1, r["pairs"])
            results[label] = {"pairs": r["pairs"], "failed": r["failed"], "pairs_s": r["pairs"] / r["seconds"],
                              "p50_ms": pct(r["latencies"], 0.50) * 1000,
                              "p99_ms": pct(r["latencies"], 0.99) * 1000,
                              "cpu_ms_pair": used / done * 1000,
                              "cpu_split": tuple(round(x / done * 1000, 2) for x in each)}
            if h0 is not None and h1 is not None:
                results[label]["server_p99_ms"] = bucket_quantile(h0, h1, 0.99) * 1000
            await asyncio.sleep(0.5)
    return results


def run(which: str, args: argparse.Namespace, tmp: str) -> dict[str, dict[str, float]]:
    dep = deploy(which, tmp)
    try:
        return asyncio.run(measure(dep, args))
    finally:
        dep.stop()


def replica_table(res: dict, args: argparse.Namespace) -> str:
    """One row per case and deployment: Burrow on SQLite and on Redis replicas beside the reference."""
    rows = ["| case | deployment | pairs/s | p50 / p99 add-to-delivery (ms) | CPU per pair (ms) | split (ms) | "
            "vs reference: pairs/s, CPU |", "|---|---|---:|---:|---:|---|---:|"]
    for label, _, _ in cases(args):
        ref = res.get("reference", {}).get(label)
        for side, r in res.items():
            r = r[label]
            vs = (f"{r['pairs_s'] / ref['pairs_s']:.1f}x, {r['cpu_ms_pair'] / ref['cpu_ms_pair']:.2f}x"
                  if ref and ref["pairs_s"] and side != "reference" else "")
            split = " + ".join(f"{x:.2f}" for x in r["cpu_split"]) if len(r["cpu_split"]) > 1 else ""
            rows.append(f"| {label} | {side} | {r['pairs_s']:.0f} | {r['p50_ms']:.1f} / {r['p99_ms']:.1f} | "
                        f"{r['cpu_ms_pair']:.2f} | {split} | {vs} |")
    return "\n".join(rows) + ("\n\nCPU per pair is summed over every replica and redis-server (the split: each "
                              "replica, then redis-server); 'vs reference' is burrow/reference (pairs/s: higher is "
                              "better; CPU: lower is better).")


def table(ours: dict, ref: dict, args: argparse.Namespace) -> str:
    rows = ["| case | metric | burrow | reference 0.8.0 | ratio |", "|---|---|---:|---:|---:|"]

    def row(case: str, name: str, a: float, b: float, better_high: bool, fmt: str = "{:.1f}") -> None:
        ratio = (a / b if better_high else b / a) if a and b else float("nan")
        rows.append(f"| {case} | {name} | {fmt.format(a)} | {fmt.format(b)} | {ratio:.1f}x |")

    for label, _, _ in cases(args):
        o, r = ours[label], ref[label]
        row(label, "pairs/s", o["pairs_s"], r["pairs_s"], True)
        row(label, "p50 add-to-delivery (ms)", o["p50_ms"], r["p50_ms"], False, "{:.1f}")
        row(label, "p99 add-to-delivery (ms)", o["p99_ms"], r["p99_ms"], False, "{:.1f}")
        row(label, "server CPU per pair (ms)", o["cpu_ms_pair"], r["cpu_ms_pair"], False, "{:.2f}")
        if "server_p99_ms" in o:
            rows.append(f"| {label} | p99 add-to-write inside our server (ms, bucket bound) | "
                        f"<= {o['server_p99_ms']:g} | n/a | |")
    row(f"{args.idle} idle bound connections", "server RSS per connection (KiB)", ours["idle"]["kib_per_conn"],
        ref["idle"]["kib_per_conn"], False)
    done = "; ".join(f"{label}: {ours[label]['pairs']:.0f} vs {ref[label]['pairs']:.0f} pairs "
                     f"({ours[label]['failed']:.0f}/{ref[label]['failed']:.0f} failed)" for label, _, _ in cases(args))
    return ("\n".join(rows) + "\n\nRatio: ours/reference for pairs/s, reference/ours for the others "
            f"(higher is better for Burrow). Completed: {done}.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="50,200", help="comma-separated concurrent pairs per case")
    ap.add_argument("--pairs", type=int, default=600, help="at most this many pairs per case")
    ap.add_argument("--seconds", type=float, default=6.0, help="stop starting new pairs after this long")
    ap.add_argument("--idle", type=int, default=1000, help="idle connections for the RSS measurement")
    ap.add_argument("--paced", default="200", help="comma-separated concurrent pairs for paced cases ('' = none)")
    ap.add_argument("--think-ms", type=float, default=200.0, help="client think time per step in paced cases")
    ap.add_argument("--procs", type=int, default=1, help="load-generator processes")
    ap.add_argument("--only", choices=["burrow", "reference"], help="run one side only")
    ap.add_argument("--redis", action="store_true", help="also run Burrow as replicas sharing one redis-server")
    ap.add_argument("--replicas", default="1,2", help="with --redis: comma-separated replica counts")
    args = ap.parse_args()
    args.levels = [int(x) for x in args.concurrency.split(",") if x]
    args.paced = [int(x) for x in args.paced.split(",") if x]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="mailbox-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        sides = [args.only] if args.only else ["burrow", "reference"]
        if args.redis:
            sides[1:1] = [f"burrow+redis x{int(n)}" for n in args.replicas.split(",") if n]
        res = {s: run(s, args, tmp) for s in sides}
    print(f"machine: {os.cpu_count()} CPUs, 1-min load average {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after (other work on the machine skews latency)")
    for s, r in res.items():
        print(s, {k: {kk: vv if isinstance(vv, tuple) else round(vv, 2) for kk, vv in v.items()} for k, v in r.items()})
    if "burrow" in res and "reference" in res:
        print()
        print(table(res["burrow"], res["reference"], args))
    if args.redis:
        print()
        print(replica_table(res, args))


if __name__ == "__main__":
    main()
