"""Transfers through the NAT lab (harness/natlab): one JSON object per scenario (root; network namespaces).

    python bench/nat.py --json [--size BYTES] [--scenario NAME]...

Each row: {"scenario", "path" ("direct" | "relay"), "time_to_first_byte_s", "time_to_direct_s" (null
when no direct path), "bytes_ok", "throughput_MBps"}; scenario names are the NAT kinds of
harness/natlab/topology.py SCENARIOS (new scenarios and paths appear here by themselves). Times are wall
clock from starting both burrow processes (Python start-up included), so read them as same-run ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.natlab import services, upnp  # noqa: E402
from harness.natlab.rig import Lab  # noqa: E402
from harness.natlab.topology import SCENARIOS, build  # noqa: E402


def run(name: str, size: int) -> dict:
    with Lab() as lab:
        topo = build(lab, name)
        upnp.start(lab, topo)
        servers = services.start_servers(lab, topo)
        result = services.transfer(lab, topo, servers, "a", "b", size,
                                   extra=["--stun-port2", str(services.STUN_PORT2)])
        return result.row()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON list (default: a table)")
    ap.add_argument("--size", type=int, default=50_000_000, help="bytes per transfer (default %(default)s)")
    ap.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="only these (repeatable)")
    args = ap.parse_args()
    rows = [run(name, args.size) for name in args.scenario or SCENARIOS]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'scenario':<14}{'path':<8}{'first byte s':>13}{'direct s':>10}{'ok':>5}{'MB/s':>9}")
    for r in rows:
        print(f"{r['scenario']:<14}{r['path'] or '-':<8}{r['time_to_first_byte_s'] or 0:>13.2f}"
              f"{r['time_to_direct_s'] if r['time_to_direct_s'] is not None else '-':>10}"
              f"{'yes' if r['bytes_ok'] else 'NO':>5}{r['throughput_MBps'] or 0:>9.1f}")


if __name__ == "__main__":
    main()
