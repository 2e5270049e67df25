"""Benchmark: a large file over loopback, burrow -> burrow vs magic-wormhole -> magic-wormhole.

Client rows: burrow (`burrow send FILE` as a user runs it: a Dilated transfer between burrow peers),
burrow-classic (`--classic`: classic Transit, the transfer a magic-wormhole or wormhole-william peer gets),
burrow-dilated (`--dilated`), wormhole (magic-wormhole 0.24 on both sides).

Runs the reference mailbox + transit relay (or ours with --servers burrow) on 127.0.0.1, then for each
client pair and mode (direct; relay forced with --no-listen on both sides) sends one file and measures:
  * MB/s: file size / (time the receiver's output reached full size - time its first byte appeared),
    sampled every POLL seconds from the receiving directory (the same method for both clients);
  * end-to-end seconds: from starting the receiver (the sender is already waiting) until it exits, so
    start-up, code exchange, connection race, the transfer and the closing acknowledgement all count;
  * CPU seconds (user+sys) of the sender and receiver processes (from wait4 rusage, startup included).
Each mode also runs the cipher-only stream (bench/cipher_only.py --cipher secretbox) on the same path: two
processes that only seal, send, receive and open classic Transit records, no protocol, no file, no hash; a
yardstick for what the cipher and the path allow. Prints a Markdown table with the burrow / magic-wormhole
and burrow / cipher-only ratios.
With --clients ...,floor each mode also runs the floor: the same stream, but the sender reads each record
from the file and the receiver hashes it (SHA-256) and writes it, the least a transfer does whose sender
checks the receiver's digest (wormhole-william's); floor-nohash is the same without the hash, the least a
transfer between burrow peers does (a burrow sender needs no digest, so its receiver does not hash).

Usage: python bench/transfer.py [--size-mib 1024] [--servers reference|burrow] [--congestion cubic|bbr]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from netns import add_congestion_option, apply_congestion  # noqa: E402

from harness.wormhole_servers import VENV_BIN, start_servers  # noqa: E402

POLL = 0.01  # seconds between size samples
CASE_TIMEOUT = 300.0  # seconds per transfer before we give up
CHUNK = 1024 * 1024


def make_file(path: Path, size: int) -> None:
    """Incompressible-looking data without spending seconds in os.urandom: 64 random MiB blocks reused."""
    blocks = [os.urandom(CHUNK) for _ in range(64)]
    with open(path, "wb") as f:
        for i in range(size // CHUNK):
            f.write(blocks[(i * 7) % 64])
        f.write(os.urandom(size % CHUNK))


def commands(client: str, relay: str, transit: str, code: str, src: Path, relay_only: bool):
    nl = ["--no-listen"] if relay_only else []
    if client in ("burrow", "burrow-classic", "burrow-dilated"):
        b = str(VENV_BIN / "burrow")
        common = ["--relay-url", relay, "--transit-helper", transit, "--hide-progress"] + nl
        how = {"burrow": [], "burrow-classic": ["--classic"], "burrow-dilated": ["--dilated"]}[client]
        return [b, "send", *common, *how, "--code", code, str(src)], [b, "receive", *common, "--accept-file", code]
    w = str(VENV_BIN / "wormhole")
    common = ["--relay-url", relay, "--transit-helper", transit]
    return ([w, *common, "send", "--hide-progress", *nl, "--code", code, str(src)],
            [w, *common, "receive", "--hide-progress", "--accept-file", *nl, code])


def wait_rusage(proc: subprocess.Popen, out: dict, key: str) -> None:
    _, status, ru = os.wait4(proc.pid, 0)
    out[key + "_exit"] = time.monotonic()
    proc.returncode = os.waitstatus_to_exitcode(status)
    out[key] = ru.ru_utime + ru.ru_stime


def received_bytes(rdir: Path) -> int:
    """Bytes in the receiving directory; a partial file renamed between listing and stat() is skipped."""
    got = 0
    for p in rdir.iterdir() if rdir.exists() else ():
        with contextlib.suppress(FileNotFoundError):
            got += p.stat().st_size if p.is_file() else 0
    return got


def run_case(client: str, relay_only: bool, servers, src: Path, work: Path, n: int) -> dict:
    size = src.stat().st_size
    rdir = work / f"rx-{client}-{n}"
    rdir.mkdir()
    code = f"{700 + n}-purple-sausages"
    send, recv = commands(client, servers.relay_url, servers.transit_helper, code, src, relay_only)
    cpu: dict = {}
    logs = open(work / f"case-{n}.log", "wb")  # noqa: SIM115
    ps = subprocess.Popen(send, stdout=logs, stderr=logs, stdin=subprocess.DEVNULL)
    ts = threading.Thread(target=wait_rusage, args=(ps, cpu, "send"))
    ts.start()
    time.sleep(0.5)
    launched = time.monotonic()
    pr = subprocess.Popen(recv, cwd=rdir, stdout=logs, stderr=logs, stdin=subprocess.DEVNULL)
    tr = threading.Thread(target=wait_rusage, args=(pr, cpu, "recv"))
    tr.start()
    first = full = None
    deadline = time.monotonic() + CASE_TIMEOUT
    while tr.is_alive() and time.monotonic() < deadline:
        now = time.monotonic()
        got = received_bytes(rdir)
        if got and first is None:
            first = now
        if got >= size and full is None:
            full = now
        time.sleep(POLL)
    end = time.monotonic()
    if tr.is_alive():
        pr.kill()
        ps.kill()
    tr.join()
    ts.join(30)
    logs.close()
    full = full or end
    ok = pr.returncode == 0 and ps.returncode == 0 and (rdir / src.name).stat().st_size == size
    secs = (full - first) if first else float("nan")
    e2e = cpu.get("recv_exit", end) - launched
    return {"client": client, "mode": "relay" if relay_only else "direct", "ok": ok, "seconds": secs,
            "mbps": size / secs / 1e6 if first else 0.0, "e2e": e2e, "e2e_mbps": size / e2e / 1e6,
            "cpu_send": cpu.get("send", 0.0),
            "cpu_recv": cpu.get("recv", 0.0)}


def run_cipher_only(relay_only: bool, servers, size: int, src: Path | None = None, work: Path | None = None,
                    sha256: bool = True) -> dict:
    """The cipher-only stream on the same path (direct, or through the transit relay), with its CPU.

    With `src` (and `work`), the floor: the sender reads `src`, the receiver hashes (unless `sha256` is
    false: floor-nohash) and writes a copy."""
    script = str(ROOT / "bench" / "cipher_only.py")
    where = ["--transit", servers.transit_helper] if relay_only else ["--listen"]
    floor_send = ["--file", str(src)] if src else []
    floor_recv = (["--out", str(work / "floor-copy.bin")] + ([] if sha256 else ["--no-hash"])) if src else []
    cpu: dict = {}
    recv = subprocess.Popen([sys.executable, script, "recv", *where, "--bytes", str(size), "--cipher", "secretbox",
                             *floor_recv], stdout=subprocess.PIPE, text=True)
    try:
        port = recv.stdout.readline().split()[1]
        where = ["--transit", servers.transit_helper] if relay_only else ["--connect", f"127.0.0.1:{port}"]
        send = subprocess.Popen([sys.executable, script, "send", *where, "--bytes", str(size),
                                 "--cipher", "secretbox", *floor_send])
        ts = threading.Thread(target=wait_rusage, args=(send, cpu, "send"))
        ts.start()
        _, got, seconds = recv.stdout.readline().split()
        recv.stdout.close()
        wait_rusage(recv, cpu, "recv")
        ts.join(CASE_TIMEOUT)
    finally:
        if recv.poll() is None:
            recv.kill()
    secs = float(seconds)
    if src:
        (work / "floor-copy.bin").unlink(missing_ok=True)
    name = ("floor" if sha256 else "floor-nohash") if src else "cipher-only"
    return {"client": name, "mode": "relay" if relay_only else "direct", "ok": int(got) >= size,
            "seconds": secs, "mbps": int(got) / secs / 1e6, "e2e": secs, "e2e_mbps": int(got) / secs / 1e6,
            "cpu_send": cpu.get("send", 0.0), "cpu_recv": cpu.get("recv", 0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--servers", default="reference", choices=["reference", "burrow"])
    ap.add_argument("--clients", default="burrow,burrow-classic,wormhole,cipher-only",
                    help="burrow (plain `burrow send`), burrow-classic (--classic), burrow-dilated (--dilated), "
                         "wormhole (magic-wormhole 0.24), the cipher-only yardstick, floor (the "
                         "cipher-only stream that also reads the file, hashes and writes the copy) and "
                         "floor-nohash (the same without the hash)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each case N times (interleaved) and keep the fastest: other load on a shared "
                         "machine only ever slows a run down")
    ap.add_argument("--workdir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where the file and the received copy live (default /dev/shm: measure the transfer, "
                         "not the disk)")
    add_congestion_option(ap)
    args = ap.parse_args()
    network = apply_congestion(args)  # before any thread: the servers and clients inherit it
    if network is None:
        return
    work = Path(tempfile.mkdtemp(prefix="burrow-bench-", dir=args.workdir))
    try:
        src = work / "payload.bin"
        make_file(src, args.size_mib * CHUNK)
        servers = start_servers(args.servers, work)
        rows = []
        try:
            n = 0
            for _ in range(max(1, args.repeat)):
                for mode in (False, True):
                    for client in args.clients.split(","):
                        if client == "cipher-only":
                            rows.append(run_cipher_only(mode, servers, src.stat().st_size))
                        elif client in ("floor", "floor-nohash"):
                            rows.append(run_cipher_only(mode, servers, src.stat().st_size, src, work,
                                                        sha256=client == "floor"))
                        else:
                            rows.append(run_case(client, mode, servers, src, work, n))
                        n += 1
                        print(rows[-1], file=sys.stderr, flush=True)
                        for p in work.glob("rx-*"):
                            shutil.rmtree(p)  # keep at most one copy on disk
        finally:
            servers.stop()
        best: dict = {}
        for r in rows:
            k = (r["mode"], r["client"])
            if k not in best or (r["ok"], r["mbps"]) > (best[k]["ok"], best[k]["mbps"]):
                best[k] = r
        print_table(list(best.values()), args.size_mib, args.repeat, len(rows), network)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def print_table(rows: list[dict], size_mib: int, repeat: int = 1, runs: int = 0, network: str = "") -> None:
    load = os.getloadavg()[0]
    print(f"\n{size_mib} MiB file over loopback, best of {repeat} (load average {load:.1f} on {os.cpu_count()} "
          f"CPUs at the end), {network}\n")
    print("| mode | client | MB/s | seconds | end-to-end s | end-to-end MB/s | CPU s sender | CPU s receiver | ok |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['client']} | {r['mbps']:.0f} | {r['seconds']:.2f} | {r['e2e']:.2f} | "
              f"{r['e2e_mbps']:.0f} | {r['cpu_send']:.2f} | {r['cpu_recv']:.2f} | {'yes' if r['ok'] else 'NO'} |")
    print()
    for mode in ("direct", "relay"):
        by = {r["client"]: r for r in rows if r["mode"] == mode}
        pairs = [(b, o) for b in ("burrow", "burrow-classic", "burrow-dilated")
                 for o in ("burrow-classic", "wormhole", "cipher-only", "floor", "floor-nohash") if b != o]
        for name, other in pairs:
            if name in by and other in by and by[other]["mbps"] and by[other]["e2e_mbps"]:
                b, w = by[name], by[other]
                print(f"- {mode}: {name} / {other} rate = {b['mbps'] / w['mbps']:.2f}x streaming, "
                      f"{b['e2e_mbps'] / w['e2e_mbps']:.2f}x end to end; CPU seconds (both sides) "
                      f"{name} {b['cpu_send'] + b['cpu_recv']:.2f} vs {other} {w['cpu_send'] + w['cpu_recv']:.2f}")


if __name__ == "__main__":
    main()
