"""Transfers through the NAT lab (harness/natlab): one JSON object per scenario (root; network namespaces).

    python bench/nat.py [--json] [--size BYTES] [--scenario NAME]... [--transfer default|dilated|classic|iroh]...
                        [--derp] [--no-transit]

Each row: {"scenario", "path" ("direct" | "relay"), "time_to_first_byte_s", "time_to_direct_s" (null
when no direct path), "bytes_ok", "throughput_MBps", "transfer", "phases"}. "transfer" is "default" (plain
`burrow send FILE` to `burrow receive`: what a user of two burrow clients gets, a Dilated transfer), "classic"
(`--classic`: the transfer a magic-wormhole 0.24 or wormhole-william peer gets) or "dilated" (`--dilated`); scenario
names are harness/natlab/topology.py SCENARIOS (new scenarios and paths appear here by themselves). Times
are wall clock from starting both burrow processes, so read them as same-run ratios. "phases" splits the
time to the first byte (harness/natlab/services.py Transfer.phases): the sender's code printed (Python
start-up, imports, mailbox), the key agreed (classic), the first connection, the first byte. The table
also shows cli_startup_s: `python -m burrow.client.cli --help` in a peer namespace (interpreter and CLI
import alone), measured once per scenario.

`--transfer iroh` runs two real iroh endpoints (PyPI iroh, harness/natlab/iroh_pair.py) homed on the lab's
burrow-relay instead, twice per scenario: with the relay's QUIC address discovery ("qad": true) and without
it ("qad": false, the relayed yardstick). Its rows: "path", "route" (the selected path's address),
"connect_s" and "time_to_direct_s" (from the dial), "bytes_ok", "a_to_b_MBps" and "b_to_a_MBps" (SIZE bytes,
at most 64 MiB, each way, one direction after the other; each the receiver's rate from its first read to
its last, so the Python binding's own per-byte copying of the payload is left out), "throughput_MBps" (the
slower direction).

--derp names the lab's burrow-relay as DERP relay on both sides: Dilation then also punches UDP and, when no
TCP attempt connects, runs over QUIC ("route" starts with "quic:"). --no-transit points both sides at a
transit relay that is not there. Each row carries "derp" and "transit" so such rows stay apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.natlab import services, upnp  # noqa: E402
from harness.natlab.iroh_pair import iroh_pair  # noqa: E402
from harness.natlab.rig import Lab  # noqa: E402
from harness.natlab.topology import SCENARIOS, build  # noqa: E402


def cli_startup(lab: Lab, ns: str) -> float:
    t0 = time.monotonic()
    lab.run(ns, [sys.executable, "-m", services.MODULES["client"], "--help"], env=services.python_env())
    return round(time.monotonic() - t0, 3)




def run(name: str, size: int, kinds: list[str], derp: bool = False, transit: bool = True) -> list[dict]:
    extra = ["--stun-port2", str(services.STUN_PORT2)]
    if derp:  # the lab relay's dev certificate: --insecure (the mailbox is plain ws://)
        extra += ["--derp-relay", f"https://{services.RELAY_NAME}:{services.RELAY_HTTPS}", "--insecure"]
    if not transit:
        extra += ["--transit-helper", services.DEAD_TRANSIT]
    with Lab() as lab:
        topo = build(lab, name)
        upnp.start(lab, topo)
        servers = services.start_servers(lab, topo)
        startup = cli_startup(lab, topo.hosts["b"].ns)
        rows = []
        for kind in kinds:
            result = services.transfer(lab, topo, servers, "a", "b", size, dilated=kind == "dilated",
                                       default=kind == "default",
                                       code=f"7-natlab-{kind}", extra=extra)
            rows.append({**result.row(), "route": result.route, "derp": derp, "transit": transit,
                         "cli_startup_s": startup})
        return rows


IROH_DIRECT_WAIT = 10.0  # s the iroh dialler waits for a direct path before sending


def run_iroh(name: str, size: int) -> list[dict]:
    rows = []
    for qad in (True, False):
        with Lab() as lab:
            rows.append(iroh_pair(lab, name, qad=qad, nbytes=size, direct_wait=IROH_DIRECT_WAIT).row())
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON list (default: a table)")
    ap.add_argument("--size", type=int, default=50_000_000, help="bytes per transfer (default %(default)s)")
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="only these (repeatable)")
    ap.add_argument("--transfer", action="append", choices=["default", "dilated", "classic", "iroh"],
                    help="which transfers per scenario (repeatable; default: default and classic)")
    ap.add_argument("--derp", action="store_true", help="both sides name the lab's DERP relay (default: off)")
    ap.add_argument("--no-transit", action="store_true", help="no transit relay reachable (default: off)")
    args = ap.parse_args()
    kinds = args.transfer or ["default", "classic"]
    wormhole = [k for k in kinds if k != "iroh"]
    rows = []
    for name in args.scenario or SCENARIOS:
        if wormhole:
            rows += run(name, args.size, wormhole, derp=args.derp, transit=not args.no_transit)
        if "iroh" in kinds:
            rows += run_iroh(name, args.size)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    def s(v) -> str:
        return "-" if v is None else f"{v:.2f}"

    print(f"{'scenario':<14}{'transfer':<9}{'path':<8}{'route':<26}{'ok':>4}{'MB/s':>7}{'start':>7}{'code':>7}{'key':>7}"
          f"{'connect':>8}{'1st byte':>9}{'direct':>8}")
    for r in rows:
        ph = r.get("phases", {})  # iroh rows: connect_s in the "connect" column, no start/code/key/first byte
        kind = r["transfer"] + ("" if r["transfer"] != "iroh" else "+qad" if r["qad"] else "-qad")
        print(f"{r['scenario']:<14}{kind:<9}{r['path'] or '-':<8}{(r['route'] or '-')[:25]:<26}{'yes' if r['bytes_ok'] else 'NO':>4}"
              f"{r['throughput_MBps'] or 0:>7.1f}{s(r.get('cli_startup_s')):>7}{s(ph.get('code_s')):>7}{s(ph.get('key_s')):>7}"
              f"{s(ph.get('connected_s', r.get('connect_s'))):>8}{s(r.get('time_to_first_byte_s')):>9}"
              f"{s(r['time_to_direct_s']):>8}")


if __name__ == "__main__":
    main()
