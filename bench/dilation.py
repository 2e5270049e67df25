"""Dilation benchmark: burrow <-> burrow against magic-wormhole 0.24 <-> magic-wormhole 0.24, same run.

Run: .venv/bin/python bench/dilation.py [--mb 1000] [--repeat 2] [--servers reference|burrow] [--cases direct,relay]
     [--congestion host,cubic]

Each case starts two peer processes (so each side has its own interpreter, as in real use) through one
mailbox and transit relay on 127.0.0.1: the receiver listens for subprotocol "up", the sender opens 1 or 8
subchannels and writes `--mb` MB in total, each blob length-checked. Reported: MB/s from the sender's
"dilated" to the last "received" line, and the CPU seconds both peer processes spent in that interval (psutil
user+system), fastest of `--repeat` runs. Byte counts are always checked; `--verify` adds a SHA-256 per blob
(the interop tests do that). "relay" disables listening on both sides so the transit relay carries everything.
Each row also runs the cipher-only stream (bench/cipher_only.py) on the same path: two processes that do
nothing but seal, send, receive and open the records, a yardstick for what the cipher and the path allow on
the machine. The machine is shared: compare the ratio printed per row, not absolute figures across runs.
The TCP congestion control matters as much as anything here (see bench/netns.py), so by default the whole
benchmark runs twice: on the host's network as it is, then in a private loopback-only network namespace
with cubic, the Linux default (`--congestion host,cubic`); each table's header names the one it used.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netns import add_congestion_option, apply_congestion  # noqa: E402

from harness.dilation import Peer  # noqa: E402
from harness.wormhole_servers import start_servers  # noqa: E402

CASE_TIMEOUT = 120.0  # seconds per case before it is reported as failed


# ------------------------------------------------------------------ burrow peer (same CLI as MW_PEER)
async def burrow_peer(args) -> None:
    from burrow.client.dilation.aio import dilate
    from burrow.client.wormhole import Wormhole
    from harness.dilation import send_blob, sink_blob

    def say(*parts):
        print(*parts, flush=True)

    w = Wormhole(args.relay_url, transit_helper=args.transit, dilation=True)
    await w.open()
    if args.code:
        w.set_code(args.code)
    else:
        w.allocate_code()
        say("code", await w.get_code())
    d = await dilate(w, listen=not args.no_listen)
    received = []

    async def serve(name):
        listener = d.listen(name)
        while True:
            r, wr = await listener.accept()

            async def one(r=r, wr=wr):
                n, digest = await sink_blob(r, wr, verify=not args.no_hash)
                say("received", name, n, digest)
                received.append(digest)

            d._spawn(one())

    for name in args.listen:
        d._spawn(serve(name))
    await d.when_connected()
    say("dilated")
    jobs = []
    for spec in args.open:
        name, size, *count = spec.split(":")

        async def send(i, name=name, size=int(size)):
            r, wr = await d.open(name)
            mine, answer = await send_blob(r, wr, size, verify=not args.no_hash)
            say("sent", f"{name}#{i}", size, mine)
            say("answer", f"{name}#{i}", answer)

        jobs += [send(i) for i in range(int(count[0]) if count else 1)]
    await asyncio.gather(*jobs)
    while len(received) < args.expect:
        await asyncio.sleep(0.05)
    if args.stay:
        await asyncio.sleep(args.stay)
    say("done")
    await d.close()
    await w.close(mood="happy")


def peer_main(argv) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("relay_url")
    ap.add_argument("transit")
    ap.add_argument("--code")
    ap.add_argument("--no-listen", action="store_true")
    ap.add_argument("--listen", action="append", default=[])
    ap.add_argument("--open", action="append", default=[])
    ap.add_argument("--expect", type=int, default=0)
    ap.add_argument("--stay", type=float, default=0.0)
    ap.add_argument("--ping-interval", type=float, default=None)
    ap.add_argument("--no-hash", action="store_true")
    asyncio.run(burrow_peer(ap.parse_args(argv)))


# ------------------------------------------------------------------ orchestration
async def start_peer(impl: str, servers, *args: str) -> Peer:
    if impl == "mw":
        return await Peer.start(servers.relay_url, servers.transit_helper, *args)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--peer", servers.relay_url, servers.transit_helper, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, cwd=ROOT)
    return Peer(proc)


def cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


async def run_case(impl: str, servers, *, relay: bool, subchannels: int, total: int,
                   verify: bool) -> tuple[float, float]:
    size = total // subchannels
    nl = ["--no-listen"] if relay else []
    nl += [] if verify else ["--no-hash"]
    recv = await start_peer(impl, servers, "--listen", "up", "--expect", str(subchannels), "--stay", "1", *nl)
    send = None
    try:
        code = (await recv.expect("code"))[1]
        send = await start_peer(impl, servers, "--code", code, "--open", f"up:{size}:{subchannels}", "--stay",
                                "1", *nl)
        await send.expect("dilated", CASE_TIMEOUT)
        t0, c0 = time.perf_counter(), cpu(send.proc.pid) + cpu(recv.proc.pid)
        for _ in range(subchannels):
            await recv.expect("received", CASE_TIMEOUT)
        dt = time.perf_counter() - t0
        used = cpu(send.proc.pid) + cpu(recv.proc.pid) - c0
        sent = [await send.expect("sent", CASE_TIMEOUT) for _ in range(subchannels)]
        answers = [await send.expect("answer", CASE_TIMEOUT) for _ in range(subchannels)]
        assert sorted(s[3] for s in sent) == sorted(a[2] for a in answers), "SHA-256 mismatch"
        assert all(int(s[2]) == size for s in sent)
        return size * subchannels / dt / 1e6, used
    finally:
        for p in (send, recv):
            if p is not None:
                await p.finish(15)


async def run_cipher_only(servers, *, relay: bool, total: int) -> float:
    """MB/s of the cipher-only stream (bench/cipher_only.py) on the same path: Dilation's mandatory work."""
    script = str(ROOT / "bench" / "cipher_only.py")
    where = ["--transit", servers.transit_helper] if relay else ["--listen"]
    recv = await asyncio.create_subprocess_exec(sys.executable, script, "recv", *where, "--bytes", str(total),
                                                stdout=asyncio.subprocess.PIPE)
    try:
        port = (await asyncio.wait_for(recv.stdout.readline(), CASE_TIMEOUT)).split()[1].decode()
        where = ["--transit", servers.transit_helper] if relay else ["--connect", f"127.0.0.1:{port}"]
        send = await asyncio.create_subprocess_exec(sys.executable, script, "send", *where, "--bytes", str(total))
        _, got, seconds = (await asyncio.wait_for(recv.stdout.readline(), CASE_TIMEOUT)).split()
        await asyncio.wait_for(send.wait(), CASE_TIMEOUT)
        return int(got) / float(seconds) / 1e6
    finally:
        if recv.returncode is None:
            recv.kill()
        await recv.wait()


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=1000, help="MB per case (default 1000: a sustained rate)")
    ap.add_argument("--servers", default="reference", choices=["reference", "burrow"])
    ap.add_argument("--cases", default="direct,relay")
    ap.add_argument("--subchannels", default="1,8")
    ap.add_argument("--verify", action="store_true", help="SHA-256 every blob (costs CPU on both sides)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per case; the fastest is reported (default 2)")
    ap.add_argument("--impls", default="burrow,mw,cipher",
                    help="which pairs to run; cipher: the cipher-only stream (bench/cipher_only.py)")
    add_congestion_option(ap, default="host,cubic")
    return ap.parse_args()


def _vs(rate: float, mw_rate: float, have_mw: bool) -> str:
    return f"{rate / mw_rate:.2f}x" if have_mw else "n/a"


async def main(a, network: str) -> None:
    total = a.mb * 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        servers = start_servers(a.servers, Path(tmp))
        try:
            rows = []
            for path in a.cases.split(","):
                for n in (int(x) for x in a.subchannels.split(",")):
                    res = {}
                    for impl in a.impls.split(","):
                        if impl == "cipher":
                            res[impl] = (max([await run_cipher_only(servers, relay=path == "relay", total=total)
                                              for _ in range(a.repeat)]), 0.0)
                            continue
                        runs = [await run_case(impl, servers, relay=path == "relay", subchannels=n, total=total,
                                               verify=a.verify) for _ in range(a.repeat)]
                        res[impl] = max(runs)
                    rows.append((path, n, res))
                    print(f"# {path} x{n}: " + ", ".join(f"{k} {v[0]:.1f} MB/s" for k, v in res.items()),
                          file=sys.stderr, flush=True)
        finally:
            servers.stop()
    print(f"\nDilation, {a.mb} MB per case, {a.servers} mailbox + transit relay on 127.0.0.1, {network}\n")
    print("| path | subchannels | burrow MB/s | burrow CPU s | magic-wormhole 0.24 MB/s | magic-wormhole CPU s "
          "| speed ratio | CPU ratio | cipher-only MB/s | cipher-only / magic-wormhole | burrow / cipher-only |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path, n, res in rows:
        (bm, bc), (mm, mc) = res.get("burrow", (0.0, 1e-9)), res.get("mw", (1e-9, 0.0))
        cm = res.get("cipher", (0.0, 0.0))[0]
        cipher = f"| {cm:.1f} | {_vs(cm, mm, 'mw' in res)} | {bm / cm:.0%} |" if cm else "| | | |"
        print(f"| {path} | {n} | {bm:.1f} | {bc:.2f} | {mm:.1f} | {mc:.2f} | {_vs(bm, mm, 'mw' in res)} "
              f"| {mc / bc:.2f}x {cipher}")
    print("\nCPU s: user+system seconds of both peer processes for the case; CPU ratio = magic-wormhole's CPU "
          "seconds / burrow's for the same bytes.\nCipher-only: two processes that only seal, send, receive and "
          "open records laid out as burrow's DATA records, as Noise messages, on the same path (bench/cipher_only.py), fastest of --repeat: "
          "what the cipher and the path allow here with no protocol work at all.")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--peer":
        peer_main(sys.argv[2:])
    else:
        args = parse_args()
        network = apply_congestion(args)  # before any thread or loop: every process started later inherits it
        if network is not None:
            asyncio.run(main(args, network))
