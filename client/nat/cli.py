"""`burrow netcheck RELAY_URL...`: what this network allows, for users and operators.

Prints the NAT kind (none / eim / symmetric / no-udp / unknown), the public IPv4 and IPv6 address,
whether the mapping depends on the destination port, whether the NAT keeps ports and hairpins, which
port-mapping protocol the router speaks, whether a captive portal intercepts HTTP, and each relay's
round trip with the preferred one. `--json` prints the same as one JSON object. Exit status 0 when any
relay answered (STUN or HTTPS), 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys

from ..options import ClientParser, VersionAction
from .netcheck import Relay, netcheck
from .report import text

DESCRIPTION = """What this network allows for direct connections: the NAT kind, the public IPv4 and IPv6
address, port mapping on the router, a captive portal, and each relay's round trip. Every probe is
bounded by --timeout and they run at once."""

EPILOG = """NAT kinds:
  none       the relay sees one of this host's own addresses: no NAT
  eim        one public mapping per socket whatever the destination (most home routers): burrow peers
             behind two such NATs connect directly with --stun-server (TCP simultaneous open)
  symmetric  a new public port per destination: only a port mapping or the relay helps
  no-udp     no STUN answer at all: UDP is blocked (or no relay answers STUN)
  unknown    UDP works, but not over IPv4

Round trips: STUN = Binding request to answer; HTTPS = GET /derp/probe on a connection whose TLS
handshake is done. The preferred relay is the lowest STUN round trip (HTTPS where UDP is blocked).
Exit status 0 when any relay answered, 1 otherwise. docs/nat.md explains every field.

example:  burrow netcheck https://relay.example.com:8443 --json"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = ClientParser(prog="burrow netcheck", description=DESCRIPTION, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action=VersionAction)
    p.add_argument("relays", nargs="+", metavar="RELAY_URL", help="burrow-relay / DERP URL, e.g. "
                   "https://relay.example.com:8443 (STUN goes to the same host)")
    p.add_argument("--stun-port", type=int, default=3478, help="relays' STUN port (default: %(default)s)")
    p.add_argument("--stun-port2", type=int, default=3479,
                   help="relays' second STUN port, burrow-relay --stun-port2 (0 = skip; default: %(default)s)")
    p.add_argument("--qad-port", type=int, default=0,
                   help="the first relay's QUIC address-discovery port, burrow-relay --qad-port (iroh uses "
                        "7842; 0 = skip; default: %(default)s)")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds per probe (default: %(default)s)")
    p.add_argument("--no-portmap", action="store_true", default=bool(os.environ.get("BURROW_NO_PORTMAP")),
                   help="do not try NAT-PMP / PCP / UPnP port mapping (env BURROW_NO_PORTMAP=1; "
                        "default: off)")
    p.add_argument("--ca-file", help="trust this CA (or self-signed) certificate for the HTTPS checks "
                                         "(default: the system's CAs)")
    p.add_argument("--insecure", action="store_true", help="skip certificate verification (testing only; default: off)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (default: aligned lines)")
    return p.parse_args(argv)


def ssl_context(args: argparse.Namespace):
    if args.insecure:
        return False
    if args.ca_file:
        return ssl.create_default_context(cafile=args.ca_file)
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    relays = [Relay(u, args.stun_port, args.stun_port2, args.qad_port if i == 0 else 0)
              for i, u in enumerate(args.relays)]
    report = asyncio.run(netcheck(relays, timeout=args.timeout, portmap=not args.no_portmap,
                                  ssl_context=ssl_context(args), ca_file=args.ca_file))
    print(json.dumps(report.to_json(), indent=2) if args.json else text(report), flush=True)
    return 0 if report.relay_stun_rtt_s or report.relay_https_rtt_s else 1


if __name__ == "__main__":
    sys.exit(main())
