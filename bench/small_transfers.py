"""Benchmark: the transfers people make most, end to end: a text, a 1 kB file, a 10 MB file.

burrow's mailbox and transit relay run on 127.0.0.1 (or the reference ones with --servers reference); for
each client the sender and the receiver start together with the code typed in advance, and the figure is
the wall time from starting both until both have exited (process start, imports, the mailbox round trips,
PAKE, the transit connection, the data, the close). Clients: burrow (plain `burrow send`: a Dilated
transfer between burrow peers), burrow-classic (`--classic`: classic Transit, what a magic-wormhole or
wormhole-william peer gets; files only, a text is the same either way), magic-wormhole 0.24 and, for the
text, wormhole-william where it is installed (its command line cannot be given a transit helper, and its
file transfers fail at once looking up the public one, which this machine cannot reach).

Every client runs from byte-compiled modules, as an installed copy does (pip compiles a package's modules
when it installs it; magic-wormhole's were compiled so): the bench compiles burrow's first, since a
checkout run with PYTHONDONTWRITEBYTECODE set would otherwise recompile them in every process.

For burrow, the receiver's debug log also says where the time went: start-up (interpreter and imports,
up to its first mailbox message), the mailbox connection (to the welcome), PAKE and versions (to its
`version` message), then the transfer itself (offer, transit connection, data, acknowledgement) and exit.

Usage: python bench/small_transfers.py [--rounds 7] [--servers burrow|reference]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository: harness/

from harness.wormhole_servers import VENV_BIN, start_servers  # noqa: E402

CASE_TIMEOUT = 60.0  # seconds per transfer
CASES = [("text", None), ("1 kB file", 1000), ("10 MB file", 10_000_000)]
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def commands(client: str, servers, code: str, src: Path | None, out: Path) -> tuple[list[str], list[str]]:
    relay, transit = servers.relay_url, servers.transit_helper
    what = ["--text", "hello"] if src is None else [str(src)]
    if client in ("burrow", "burrow-classic"):
        b, c = str(VENV_BIN / "burrow"), ["--relay-url", relay, "--transit-helper", transit]
        how = ["--classic"] if client == "burrow-classic" else []
        return [b, "send", *c, *how, "--hide-progress", "--code", code, *what], \
            [b, "receive", *c, "--hide-progress", "--accept-file", "-o", str(out), code]
    if client == "magic-wormhole":
        w, c = str(VENV_BIN / "wormhole"), ["--relay-url", relay, "--transit-helper", transit]
        return [w, *c, "send", "--hide-progress", "--code", code, *what], \
            [w, *c, "receive", "--hide-progress", "--accept-file", "-o", str(out), code]
    ww = shutil.which("wormhole-william")
    return [ww, "send", "--relay-url", relay, "--hide-progress", "--code", code, *what], \
        [ww, "receive", "--relay-url", relay, "--hide-progress", code]


_codes = iter(range(10, 1_000_000))


def one_transfer(client: str, servers, src: Path | None, work: Path, env: dict) -> tuple[float, str]:
    """Seconds from starting both sides to both exiting, and the receiver's stderr."""
    nameplate = next(_codes)  # a fresh nameplate each time: nothing waits on an earlier transfer's
    out = work / f"out-{client}-{nameplate}"
    send, recv = commands(client, servers, f"{nameplate}-purple-sausages", src, out)
    start = time.monotonic()
    sender = subprocess.Popen(send, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=work)
    receiver = subprocess.Popen(recv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=env, cwd=work, text=True)
    _, err = receiver.communicate("y\n", timeout=CASE_TIMEOUT)  # wormhole-william asks; it has no --accept-file
    sender.wait(CASE_TIMEOUT)
    took = time.monotonic() - start
    if receiver.returncode or sender.returncode:
        raise RuntimeError(f"{client}: exit {sender.returncode}/{receiver.returncode}: {err[-1500:]}")
    if src is not None:
        got = out if out.exists() else work / src.name
        if got.read_bytes() != src.read_bytes():
            raise RuntimeError(f"{client}: the received file differs")
        got.unlink()
    return took, err


def phases(err: str, started: float, ended: float) -> dict[str, float] | None:
    """Where a burrow receiver's time went, from the timestamps of its debug log (ms resolution)."""
    marks: dict[str, float] = {}
    for line in err.splitlines():
        m = LOG_TIME.match(line)
        if not m:
            continue
        t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if "mailbox tx" in line and "first" not in marks:
            marks["first"] = t
        elif '"type": "welcome"' in line and "welcome" not in marks:
            marks["welcome"] = t
        elif '"phase": "version"' in line and "mailbox tx" in line and "version" not in marks:
            marks["version"] = t
        elif '"type": "closed"' in line:
            marks["closed"] = t
    if len(marks) < 4:
        return None
    return {"start-up": marks["first"] - started, "mailbox connection": marks["welcome"] - marks["first"],
            "PAKE and versions": marks["version"] - marks["welcome"],
            "transfer and close": marks["closed"] - marks["version"], "exit": ended - marks["closed"]}


def compile_burrow() -> None:
    """Byte-compile burrow's packages (what `pip install` does for an installed copy)."""
    tops = [str(ROOT / top) for top in ("common", "wire", "client") if (ROOT / top).is_dir()]
    subprocess.run([str(VENV_BIN / "python"), "-m", "compileall", "-q", *tops], check=True,
                   stdout=subprocess.DEVNULL)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7, help="transfers per client and case (the median is shown)")
    p.add_argument("--servers", choices=["burrow", "reference"], default="burrow")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="burrow-small-"))
    clients = ["burrow", "burrow-classic", "magic-wormhole"] + (
        ["wormhole-william"] if shutil.which("wormhole-william") else [])
    compile_burrow()
    servers = start_servers(args.servers, work)
    env = dict(os.environ)
    rows, breakdown = [], {}
    try:
        for case, size in CASES:
            src = None
            if size is not None:
                src = work / f"payload-{size}.bin"
                src.write_bytes(os.urandom(size))
            medians = {}
            for client in clients:
                if (client == "wormhole-william" and src is not None) or (client == "burrow-classic" and src is None):
                    continue
                times = []
                for _ in range(args.rounds):
                    took, _ = one_transfer(client, servers, src, work, env)
                    times.append(took)
                medians[client] = statistics.median(times)
            debug = dict(env, BURROW_LOG_LEVEL="DEBUG")
            cuts = []
            for _ in range(args.rounds):
                started = time.time()
                _, err = one_transfer("burrow", servers, src, work, debug)
                cut = phases(err, started, time.time())
                if cut:
                    cuts.append(cut)
            if cuts:
                breakdown[case] = {k: statistics.median(c[k] for c in cuts) for k in cuts[0]}
            rows.append((case, medians))
    finally:
        servers.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.servers} servers on 127.0.0.1, median of {args.rounds} transfers, code typed in advance\n")
    head = " | ".join(f"{c} (s)" for c in clients)
    print(f"| transfer | {head} | burrow / magic-wormhole |")
    print("|---|" + "---:|" * (len(clients) + 1))
    for case, med in rows:
        cells = " | ".join(f"{med[c]:.3f}" if c in med else "n/a" for c in clients)
        print(f"| {case} | {cells} | {med['burrow'] / med['magic-wormhole']:.2f} |")
    if breakdown:
        names = list(next(iter(breakdown.values())))
        print("\nWhere a burrow receiver's time goes (median, ms):\n")
        print("| transfer | " + " | ".join(names) + " |")
        print("|---|" + "---:|" * len(names))
        for case, cut in breakdown.items():
            print(f"| {case} | " + " | ".join(f"{cut[k] * 1000:.0f}" for k in names) + " |")


if __name__ == "__main__":
    main()
