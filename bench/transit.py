"""Transit relay benchmark: Burrow vs magic-wormhole-transit-relay 0.5.0, HAProxy and a direct stream.

Run: .venv/bin/python bench/transit.py [--bytes N] [--pairs 1,8] [--rounds 3] [--pairings N] [--path veth]

Our relay (with and without splice), the reference (`twist transitrelay`), Debian's HAProxy as a plain
TCP forwarder on the same path (the sender connects to HAProxy, HAProxy to the receiver: what a relay
costs without any pairing; the yardstick for throughput and CPU per GB), two cluster rows
(`burrow-haproxy`: three replicas with --proxy-protocol behind the Helm chart's token-hashing HAProxy
front end, CPU summed over the replicas and HAProxy; `burrow-redis`: two --redis-url replicas on one
redis-server, every pair's sides on different replicas so each pair is joined by a hop, CPU summed over
both replicas and Redis; `burrow-redis-local`: the same with a shared --handover-dir, so the second
side's socket is handed to the first side's replica) and a direct socket-to-socket
stream are measured in the same run, interleaved round by round so background load hits all alike
(medians are reported):
  - throughput for 1 and 8 concurrent pairs, a bounded number of bytes per case, one direction;
  - server CPU-seconds per GB (psutil user+system of the server process over the case), and the whole
    machine's CPU-seconds per GB (all processes and the kernel, /proc/stat): once the cores are full, the
    latter bounds throughput;
  - pairing latency (second handshake sent -> its `ok` received; median and 99th percentile of 200
    sequential pairings per target, the targets taking turns pairing by pairing);
  - pairings per second (many pairs opened and closed with bounded concurrency) and server CPU per
    1000 pairings (less sensitive to a loaded machine than the rate).
`--path veth` (root) moves senders and receivers into two network namespaces joined to the host by
veth pairs (bench/netns.py): the relays listen on the host side and the direct stream is routed through
it, a path closer to a real network than loopback (where the receiver's TCP work lands on the relay).
The load generator is cheap: one thread per socket (the GIL is released in the calls below); the
sender uses send(2) from a 4 MiB buffer (or `--sender sendfile` from tmpfs), the receiver splices
into /dev/null through a 1 MiB pipe. The machine is shared: compare ratios from one run.
`--congestion cubic` runs it all in a private network namespace with that TCP congestion control
(bench/netns.py); the header names the one used.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: harness/
from netns import HOST_ADDR, PEER_ADDR, VethPair, add_congestion_option, apply_congestion  # noqa: E402

from harness.haproxy import HAProxy  # noqa: E402
from harness.ports import free_port, wait_port  # noqa: E402
from harness.redis import RedisServer  # noqa: E402
from harness.transit_front import Replica, front_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
CHUNK = 1 << 20
FILE_SIZE = 64 << 20
HOST = "127.0.0.1"  # where the relays listen (10.201.1.1 with --path veth)
VETH: VethPair | None = None  # with --path veth: senders in namespace A, receivers in B


SINK: socket.socket | None = None  # HAProxy's one backend: the receivers' listening socket
YARDSTICK: list[HAProxy] = []
SPLICE = "    option splice-request\n    option splice-response\n"


def start_haproxy(port: int) -> subprocess.Popen:
    """HAProxy in TCP mode from HOST:port to SINK, with kernel splicing forced on (`option splice-request`
    and `splice-response`: its best setting for bulk streams) and its default thread count."""
    global SINK
    with VETH.inside("b") if VETH else contextlib.nullcontext():
        SINK = socket.create_server((PEER_ADDR["b"] if VETH else "127.0.0.1", 0), backlog=64)
    host, sink_port = SINK.getsockname()[:2]
    proxy = HAProxy(Path(tempfile.mkdtemp(prefix="transit-bench-haproxy-")),
                    f"frontend relay\n    bind {HOST}:{port}\n{SPLICE}    default_backend receivers\n\n"
                    f"backend receivers\n{SPLICE}    server receiver {host}:{sink_port}\n")
    YARDSTICK.append(proxy)
    return proxy.process.proc


def haproxy_pair(port: int) -> tuple[socket.socket, socket.socket]:
    a = _connect((HOST, port), "a")
    b, _ = SINK.accept()  # HAProxy connects to the backend as soon as it accepts the sender
    return a, b


class Front:
    """`burrow-haproxy`: replicas behind the chart's HAProxy front end, stopped together."""

    def __init__(self, replicas: int = 3) -> None:
        self.workdir = tempfile.TemporaryDirectory()
        self.replicas = []
        for _ in range(replicas):
            self.replicas.append(start_server("burrow", "--proxy-protocol", "--websocket-port", "0"))
        ws_ports = [free_port() for _ in self.replicas]  # the front end's WebSocket backend is unused here
        self.port = free_port()
        config = front_config([Replica(port, w) for (_, port), w in zip(self.replicas, ws_ports, strict=True)],
                              self.port, free_port(), free_port(), HOST)
        self.haproxy = HAProxy(Path(self.workdir.name), config)
        time.sleep(4.5)  # the health checks mark every replica up (inter 2 s, rise 2)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p, _ in self.replicas] + [self.haproxy.process.pid]

    def terminate(self) -> None:
        self.haproxy.stop()
        for p, _ in self.replicas:
            p.terminate()

    def wait(self, timeout: float) -> None:
        for p, _ in self.replicas:
            p.wait(timeout)
        self.workdir.cleanup()


class CrossReplicas:
    """`burrow-redis`: two replicas on one Redis; side a always reaches the first, side b the second.
    `handover`: they share a --handover-dir (burrow-redis-local), so side b's socket is passed to the first."""

    def __init__(self, *extra: str, handover: bool = False) -> None:
        self.workdir = tempfile.TemporaryDirectory()
        work = Path(self.workdir.name)
        self.redis = RedisServer(work / "redis", appendfsync="no")
        (work / "secret").write_text(os.urandom(32).hex())
        if handover:
            extra = (*extra, "--handover-dir", str(work))
        self.replicas = []
        for _ in range(2):
            peer = free_port()
            self.replicas.append(start_server("burrow", "--redis-url", self.redis.url, "--peer-port", str(peer),
                                              "--advertise-address", f"{HOST}:{peer}",
                                              "--peer-secret-file", str(work / "secret"), *extra))
        time.sleep(1.0)  # both replicas reach Redis
        self.port = (self.replicas[0][1], self.replicas[1][1])

    @property
    def pids(self) -> list[int]:
        return [p.pid for p, _ in self.replicas] + [self.redis.process.pid]

    def terminate(self) -> None:
        for p, _ in self.replicas:
            p.terminate()

    def wait(self, timeout: float) -> None:
        for p, _ in self.replicas:
            p.wait(timeout)
        self.redis.kill()
        self.workdir.cleanup()


def processes(proc) -> list[psutil.Process] | None:
    """The processes whose CPU a case counts (all replicas, and HAProxy or Redis, for the cluster rows)."""
    if proc is None:
        return None
    return [psutil.Process(pid) for pid in (proc.pids if isinstance(proc, Front | CrossReplicas) else [proc.pid])]


def start_server(kind: str, *extra: str) -> tuple[subprocess.Popen, int]:
    if kind == "burrow-haproxy":
        front = Front()
        return front, front.port
    if kind.startswith("burrow-redis"):  # -dial: no warm hop connections, one dial per hop
        cross = CrossReplicas(*(("--peer-pool-size", "0") if kind == "burrow-redis-dial" else ()),
                              handover=kind == "burrow-redis-local")
        return cross, cross.port
    port = free_port()
    if kind == "haproxy":
        return start_haproxy(port), port
    if kind.startswith("burrow"):
        cmd = [PY, "-m", "burrow.transit_relay", "--host", HOST, "--port", str(port), "--websocket-port", "-1",
               "--admin-port", "-1", "--max-connections-per-ip", "0", "--max-connections", "0"]
        if kind == "burrow-copy":
            cmd.append("--no-splice")
        cmd.extend(extra)
    else:
        cmd = [str(Path(PY).parent / "twist"), "transitrelay", f"--port=tcp:{port}:interface={HOST}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc, HOST)
    time.sleep(0.3)  # let the probe connection's close settle
    return proc, port


def handshake(i: int, side: str) -> bytes:
    token = f"{i:064x}"
    return f"please relay {token} for side {side * 16}\n".encode()


def _connect(addr: tuple[str, int], side: str) -> socket.socket:
    """A connection from namespace `side` with --path veth, else from here."""
    with VETH.inside(side) if VETH else contextlib.nullcontext():
        return socket.create_connection(addr)


def ports_of(port: int | tuple[int, int]) -> tuple[int, int]:
    """Where sides a and b connect: one relay, or two replicas (burrow-redis)."""
    return port if isinstance(port, tuple) else (port, port)


def relay_pair(port: int | tuple[int, int], i: int) -> tuple[socket.socket, socket.socket]:
    port_a, port_b = ports_of(port)
    a = _connect((HOST, port_a), "a")
    b = _connect((HOST, port_b), "b")
    a.sendall(handshake(i, "a"))
    b.sendall(handshake(i, "b"))
    for s in (a, b):
        got = b""
        while len(got) < 3:
            more = s.recv(3 - len(got))
            if not more:
                raise RuntimeError("relay closed during handshake")
            got += more
        assert got == b"ok\n", got
    return a, b


def direct_pair() -> tuple[socket.socket, socket.socket]:
    """Loopback; with --path veth, A to B routed through the host namespace (what a relay replaces)."""
    with VETH.inside("b") if VETH else contextlib.nullcontext():
        lst = socket.create_server((PEER_ADDR["b"] if VETH else "127.0.0.1", 0))
    with lst:
        a = _connect(lst.getsockname(), "a")
        b, _ = lst.accept()
    return a, b


SEND_MODE = "sendfile"
_BLOCK = memoryview(os.urandom(4 * CHUNK))


def sender(sock: socket.socket, fd: int, total: int) -> None:
    """sendfile(2) from tmpfs (4 KiB page-cache pages), or send(2) from a 4 MiB buffer (`--sender send`,
    what real clients do: the kernel copies into large page fragments)."""
    left = total
    while left:
        if SEND_MODE == "send":
            n = sock.send(_BLOCK[:min(left, len(_BLOCK))])
        else:
            offset = (total - left) % FILE_SIZE
            n = os.sendfile(sock.fileno(), fd, offset, min(left, FILE_SIZE - offset, 16 * CHUNK))
        left -= n
    sock.shutdown(socket.SHUT_WR)


def machine_busy() -> float:
    """CPU-seconds the whole machine has spent busy (every process and the kernel, all cores)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def stream_case(pairs: list[tuple[socket.socket, socket.socket]], fd: int, per_pair: int,
                proc: list[psutil.Process] | None) -> tuple[float, float, float]:
    counts = [[0] for _ in pairs]
    threads = []
    for (a, b), c in zip(pairs, counts, strict=True):
        threads.append(threading.Thread(target=sender, args=(a, fd, per_pair)))
        threads.append(threading.Thread(target=counted_receiver, args=(b, c)))
    cpu0, busy0 = cpu_of(proc), machine_busy()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    cpu, busy = cpu_of(proc) - cpu0, machine_busy() - busy0
    for (a, b), c in zip(pairs, counts, strict=True):
        a.close()
        b.close()
        if c[0] != per_pair:
            raise RuntimeError(f"received {c[0]} of {per_pair} bytes")
    return elapsed, cpu, busy


def counted_receiver(sock: socket.socket, out: list[int]) -> None:
    r, w = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(w, 1031, CHUNK)  # F_SETPIPE_SZ: a 1 MiB pipe, so one splice moves up to 1 MiB
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        while True:
            n = os.splice(sock.fileno(), w, CHUNK)
            if n == 0:
                break
            out[0] += n
            while n:
                n -= os.splice(r, devnull, n)
    finally:
        for f in (r, w, devnull):
            os.close(f)


def cpu_of(procs: list[psutil.Process] | None) -> float:
    total = 0.0
    for proc in procs or ():
        t = proc.cpu_times()
        total += t.user + t.system
    return total


async def _pairing(port: int | tuple[int, int], i: int) -> float:
    port_a, port_b = ports_of(port)
    r1, w1 = await asyncio.open_connection(HOST, port_a)
    r2, w2 = await asyncio.open_connection(HOST, port_b)
    w1.write(handshake(i, "a"))
    await w1.drain()
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    w2.write(handshake(i, "b"))
    ok2 = await r2.readexactly(3)
    latency = time.perf_counter() - t0
    ok1 = await r1.readexactly(3)
    assert ok1 == ok2 == b"ok\n"
    for w in (w1, w2):
        w.close()
    return latency


async def latencies(ports: dict, sequential: int) -> dict:
    """`sequential` pairings on each target, one target after the other in turn, so that background load
    hits all alike: {target: (median latency s, 99th percentile latency s)}."""
    lat: dict = {k: [] for k in ports}
    for i in range(sequential):
        for k, port in ports.items():
            lat[k].append(await _pairing(port, 10_000_000 + i))
    return {k: (statistics.median(v), statistics.quantiles(v, n=100)[98]) for k, v in lat.items()}


async def pairing_bench(port: int, proc: list[psutil.Process], total: int,
                        concurrency: int) -> tuple[float, float]:
    """(pairings/s, server CPU-seconds per 1000 pairings)."""
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await _pairing(port, 20_000_000 + i)

    cpu0, t0 = cpu_of(proc), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(total)))
    rate = total / (time.perf_counter() - t0)
    await asyncio.sleep(0.5)  # let the server finish closing (and logging) the last pairs
    return rate, (cpu_of(proc) - cpu0) * 1000 / total


def measure(kind: str, servers: dict, fd: int, total_bytes: int, n: int, serial: int) -> tuple[float, float, float]:
    """One throughput case: (GB/s, server CPU-seconds, whole-machine CPU-seconds)."""
    proc, port = servers.get(kind, (None, None))
    per_pair = total_bytes // n
    if kind == "haproxy":
        pairs = [haproxy_pair(port) for _ in range(n)]
    else:
        pairs = [direct_pair() if proc is None else relay_pair(port, serial * 100 + i) for i in range(n)]
    elapsed, cpu, busy = stream_case(pairs, fd, per_pair, processes(proc))
    return per_pair * n / elapsed / 1e9, cpu, busy


def run_all(kinds: list[str], fd: int, total_bytes: int, counts: list[int], rounds: int,
            pairings: int) -> dict:
    """Interleave targets round by round so that background load hits them alike; keep medians."""
    servers = {k: start_server(k) for k in kinds if k != "direct"}
    samples: dict = {(k, n): [] for k in kinds for n in counts}
    try:
        serial = 0
        for _ in range(rounds):
            for n in counts:
                for k in kinds:
                    serial += 1
                    samples[(k, n)].append(measure(k, servers, fd, total_bytes, n, serial))
        res: dict = {k: {} for k in kinds}
        for (k, n), got in samples.items():
            gbps = statistics.median(g for g, _, _ in got)
            cpu_per_gb = sum(c for _, c, _ in got) / (len(got) * total_bytes / 1e9)
            machine_per_gb = sum(b for _, _, b in got) / (len(got) * total_bytes / 1e9)
            res[k][n] = {"gbps": gbps, "cpu_per_gb": cpu_per_gb if k != "direct" else None,
                         "machine_per_gb": machine_per_gb}
        paired = {k: port for k, (_proc, port) in servers.items() if k != "haproxy"}
        if pairings and paired:
            for k, (median, p99) in asyncio.run(latencies(paired, 200)).items():
                res[k]["latency"], res[k]["p99"] = median, p99
            for k in paired:
                proc, port = servers[k]
                res[k]["rate"], res[k]["pair_cpu"] = asyncio.run(pairing_bench(port, processes(proc), pairings, 32))
    finally:
        for proc, _port in servers.values():
            proc.terminate()
            proc.wait(10)
        if SINK is not None:
            SINK.close()
        for proxy in YARDSTICK:
            shutil.rmtree(proxy.path.parent, ignore_errors=True)
    return res


def fmt(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=int, default=1 << 30, help="bytes per throughput case (all pairs)")
    ap.add_argument("--pairs", default="1,8", help="pair counts, comma separated")
    ap.add_argument("--pairings", type=int, default=1000, help="pairs for the pairings/s figure")
    ap.add_argument("--sender", choices=["sendfile", "send"], default="send",
                    help="load generator's sending call")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported")
    ap.add_argument("--no-copy-row", action="store_true", help="skip burrow without splice")
    ap.add_argument("--no-cluster-rows", action="store_true",
                    help="skip burrow-haproxy, burrow-redis and burrow-redis-local (several replicas)")
    ap.add_argument("--only", default="", help="comma-separated subset of targets, for quick experiments "
                    "(also burrow-redis-dial: burrow-redis with --peer-pool-size 0)")
    ap.add_argument("--path", choices=["loopback", "veth"], default="loopback",
                    help="veth: senders and receivers in two network namespaces joined to the host by veth "
                         "pairs (needs root); the relays listen on the host side, the direct stream is routed")
    add_congestion_option(ap)
    args = ap.parse_args()
    args.network = apply_congestion(args)  # before any thread: the servers and namespaces inherit it
    if args.network is None:
        return
    global SEND_MODE, HOST, VETH
    SEND_MODE = args.sender
    with contextlib.ExitStack() as stack:
        if args.path == "veth":
            VETH = stack.enter_context(VethPair())
            HOST = HOST_ADDR["a"]
            args.pairings = 0  # pairing is measured on loopback; this path is about bytes
        report(args)


def report(args) -> None:
    counts = [int(x) for x in args.pairs.split(",")]
    with tempfile.NamedTemporaryFile(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as f:
        f.write(os.urandom(1 << 20) * (FILE_SIZE >> 20))
        f.flush()
        kinds = ["direct", "burrow", "burrow-copy", "haproxy", "burrow-haproxy", "burrow-redis", "burrow-redis-local",
                 "reference"]
        if args.no_copy_row:
            kinds.remove("burrow-copy")
        if args.no_cluster_rows:
            kinds.remove("burrow-haproxy")
            kinds.remove("burrow-redis")
            kinds.remove("burrow-redis-local")
        if args.only:
            kinds = [k for k in [*kinds, "burrow-redis-dial"] if k in args.only.split(",")]
            print(run_all(kinds, f.fileno(), args.bytes, counts, args.rounds, args.pairings))
            return
        results = run_all(kinds, f.fileno(), args.bytes, counts, args.rounds, args.pairings)
    ref, ours, direct = results["reference"], results["burrow"], results["direct"]
    where = "127.0.0.1" if args.path == "loopback" else "veth pairs between two network namespaces and the host"
    print(f"\nTransit relay benchmark: {args.bytes / 1e9:.2f} GB per case, one direction, {where}, "
          f"median of {args.rounds} interleaved rounds, {args.network}; server CPU = the relay process's (cluster rows: every replica's plus HAProxy's or Redis's) user+system per GB moved, "
          f"machine CPU = all processes and the kernel, senders and receivers included\n")
    head = "| figure | " + " | ".join(kinds) + " | burrow / reference | burrow / direct |"
    print(head)
    print("|" + "---|" * (len(kinds) + 3))
    for n in counts:
        row = [fmt(results[k][n]["gbps"], ".2f") for k in kinds]
        print(f"| throughput, {n} pair{'s' if n > 1 else ''} (GB/s) | " + " | ".join(row)
              + f" | {ours[n]['gbps'] / ref[n]['gbps']:.1f}x | {100 * ours[n]['gbps'] / direct[n]['gbps']:.0f}% |")
    for n in counts:
        row = [fmt(results[k][n]["cpu_per_gb"], ".2f") for k in kinds]
        ratio = ours[n]["cpu_per_gb"] / ref[n]["cpu_per_gb"] if ref[n]["cpu_per_gb"] else 0.0
        print(f"| server CPU-s per GB, {n} pair{'s' if n > 1 else ''} | " + " | ".join(row)
              + f" | {ratio:.2f} (1/{1 / ratio if ratio else 0:.1f}) | |")
    for n in counts:  # what bounds throughput once the cores are full: every byte's cost to the whole host
        row = [fmt(results[k][n]["machine_per_gb"], ".2f") for k in kinds]
        print(f"| machine CPU-s per GB, {n} pair{'s' if n > 1 else ''} | " + " | ".join(row)
              + f" | {ours[n]['machine_per_gb'] / ref[n]['machine_per_gb']:.2f} "
              f"| {ours[n]['machine_per_gb'] / direct[n]['machine_per_gb']:.2f}x |")
    for cluster in ("burrow-haproxy", "burrow-redis", "burrow-redis-local"):
        if cluster in results:
            print(f"| {cluster} / burrow, throughput | " + " | ".join(
                f"{n} pair{'s' if n > 1 else ''}: {results[cluster][n]['gbps'] / ours[n]['gbps']:.2f}"
                for n in counts) + " |" * (len(kinds) + 2 - len(counts)))
    if args.pairings:
        pairing_rows(results, kinds, ours, ref)
    if "haproxy" in results:
        print(haproxy_table(results, counts))


def pairing_rows(results: dict, kinds: list[str], ours: dict, ref: dict) -> None:
    row = [fmt(results[k].get("latency") and results[k]["latency"] * 1e3, ".2f") for k in kinds]
    print("| pairing latency, median (ms) | " + " | ".join(row)
          + f" | {ours['latency'] / ref['latency']:.2f} | |")
    row = [fmt(results[k].get("p99") and results[k]["p99"] * 1e3, ".2f") for k in kinds]
    print("| pairing latency, 99th percentile (ms) | " + " | ".join(row)
          + f" | {ours['p99'] / ref['p99']:.2f} | |")
    row = [fmt(results[k].get("rate"), ".0f") for k in kinds]
    print("| pairings per second | " + " | ".join(row) + f" | {ours['rate'] / ref['rate']:.1f}x | |")
    row = [fmt(results[k].get("pair_cpu"), ".2f") for k in kinds]
    print("| server CPU-s per 1000 pairings | " + " | ".join(row)
          + f" | {ours['pair_cpu'] / ref['pair_cpu']:.2f} | |")


def haproxy_table(results: dict, counts: list[int]) -> str:
    """burrow against HAProxy forwarding the same bytes on the same path (goal: >= 0.85x its throughput,
    <= 1.25x its CPU per GB)."""
    ours, ha = results["burrow"], results["haproxy"]
    rows = ["", "| against HAProxy (TCP mode) | burrow | HAProxy | ratio | goal |", "|---|---:|---:|---:|---|"]
    for n in counts:
        pl = "s" if n > 1 else ""
        rows.append(f"| throughput, {n} pair{pl} (GB/s) | {ours[n]['gbps']:.2f} | {ha[n]['gbps']:.2f} | "
                    f"{ours[n]['gbps'] / ha[n]['gbps']:.2f}x | >= 0.85x |")
        rows.append(f"| server CPU-s per GB, {n} pair{pl} | {ours[n]['cpu_per_gb']:.2f} | {ha[n]['cpu_per_gb']:.2f} | "
                    f"{ours[n]['cpu_per_gb'] / ha[n]['cpu_per_gb']:.2f}x | <= 1.25x |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
