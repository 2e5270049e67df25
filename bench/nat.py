"""Transfers through the NAT lab (harness/natlab): one JSON object per scenario (root; network namespaces).

    python bench/nat.py [--json] [--size BYTES] [--scenario NAME]... [--transfer dilated|classic]...

Each row: {"scenario", "path" ("direct" | "relay"), "time_to_first_byte_s", "time_to_direct_s" (null
when no direct path), "bytes_ok", "throughput_MBps", "transfer" ("dilated" | "classic"), "phases"}; scenario
names are harness/natlab/topology.py SCENARIOS (new scenarios and paths appear here by themselves). Times
are wall clock from starting both burrow processes, so read them as same-run ratios. "phases" splits the
time to the first byte (harness/natlab/services.py Transfer.phases): the sender's code printed (Python
start-up, imports, mailbox), the key agreed (classic), the first connection, the first byte. The table
also shows cli_startup_s: `python -m burrow.client.cli --help` in a peer namespace (interpreter and CLI
import alone), measured once per scenario.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.natlab import services, upnp  # noqa: E402
from harness.natlab.rig import Lab  # noqa: E402
from harness.natlab.topology import SCENARIOS, build  # noqa: E402


def cli_startup(lab: Lab, ns: str) -> float:
    t0 = time.monotonic()
    lab.run(ns, [sys.executable, "-m", services.MODULES["client"], "--help"], env=services.python_env())
    return round(time.monotonic() - t0, 3)


def run(name: str, size: int, kinds: list[str]) -> list[dict]:
    with Lab() as lab:
        topo = build(lab, name)
        upnp.start(lab, topo)
        servers = services.start_servers(lab, topo)
        startup = cli_startup(lab, topo.hosts["b"].ns)
        rows = []
        for kind in kinds:
            result = services.transfer(lab, topo, servers, "a", "b", size, dilated=kind == "dilated",
                                       code=f"7-natlab-{kind}", extra=["--stun-port2", str(services.STUN_PORT2)])
            rows.append({**result.row(), "cli_startup_s": startup})
        return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON list (default: a table)")
    ap.add_argument("--size", type=int, default=50_000_000, help="bytes per transfer (default %(default)s)")
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="only these (repeatable)")
    ap.add_argument("--transfer", action="append", choices=["dilated", "classic"],
                    help="which transfers per scenario (repeatable; default both)")
    args = ap.parse_args()
    rows = [row for name in args.scenario or SCENARIOS for row in run(name, args.size,
                                                                     args.transfer or ["dilated", "classic"])]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    def s(v) -> str:
        return "-" if v is None else f"{v:.2f}"

    print(f"{'scenario':<14}{'transfer':<9}{'path':<8}{'ok':>4}{'MB/s':>7}{'start':>7}{'code':>7}{'key':>7}"
          f"{'connect':>8}{'1st byte':>9}{'direct':>8}")
    for r in rows:
        ph = r["phases"]
        print(f"{r['scenario']:<14}{r['transfer']:<9}{r['path'] or '-':<8}{'yes' if r['bytes_ok'] else 'NO':>4}"
              f"{r['throughput_MBps'] or 0:>7.1f}{s(r['cli_startup_s']):>7}{s(ph['code_s']):>7}{s(ph['key_s']):>7}"
              f"{s(ph['connected_s']):>8}{s(r['time_to_first_byte_s']):>9}{s(r['time_to_direct_s']):>8}")


if __name__ == "__main__":
    main()
