"""What netcheck learned about this host's network, and the NAT kind that follows from it (no I/O).

`Report` holds the raw observations (probes.py fills them in); `classify()` names the NAT:

  no-udp     no STUN answer at all (UDP blocked on the way out, or no relay answering STUN)
  none       the STUN-mapped IPv4 address is one of our own: no NAT
  symmetric  the mapping differs per destination port (endpoint-dependent mapping): hole punching
             from the mapped address cannot work, only a port mapping or a relay
  eim        one mapping for every destination (endpoint-independent mapping)
  unknown    UDP works but no IPv4 mapping was seen

`preserves_port` says whether the NAT kept the local port (the condition for advertising the STUN address
with our TCP listening port as a direct hint); `portmap` names the gateway protocol that mapped a port.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Report:
    udp: bool = False  # any STUN answer arrived
    ipv4: bool = False
    ipv6: bool = False
    global_v4: str | None = None  # "ip:port" the first relay saw
    global_v6: str | None = None  # "[ip]:port"
    qad: str | None = None  # "ip:port" (IPv4) the first relay's QUIC address discovery reported (--qad-port)
    local_v4: list[str] = field(default_factory=list)
    mapping_varies_by_dest_port: bool | None = None  # None: only one STUN port answered
    preserves_port: bool | None = None
    hairpin: bool | None = None
    portmap: str | None = None  # "nat-pmp" | "upnp" | None
    portmap_external: str | None = None  # "ip:port" of the test mapping
    pcp: bool | None = None  # the gateway answered a PCP ANNOUNCE (None: not asked, or no gateway)
    captive_portal: bool | None = None  # None: no relay answered over HTTP(S)
    relay_stun_rtt_s: dict[str, float] = field(default_factory=dict)  # Binding request -> response, fastest
    relay_https_rtt_s: dict[str, float] = field(default_factory=dict)  # GET /derp/probe after the TLS handshake
    preferred_relay: str | None = None  # lowest STUN round trip; lowest HTTPS round trip where UDP is blocked
    nat: str = "unknown"
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def split_hostport(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return host.strip("[]"), int(port)


def classify(r: Report) -> str:
    if not r.udp:
        return "no-udp"
    if r.global_v4 is None:
        return "unknown"
    if split_hostport(r.global_v4)[0] in r.local_v4:
        return "none"
    if r.mapping_varies_by_dest_port:
        return "symmetric"
    return "eim"


def prefer(latencies: dict[str, float]) -> str | None:
    """The relay with the lowest latency (ties: the one listed first)."""
    return min(latencies, key=latencies.get) if latencies else None


def preferred_relay(r: Report) -> str | None:
    """By STUN round trip when any relay answered STUN (the path DERP-relayed UDP would take), else by the
    HTTPS round trip; the two are never mixed, as an HTTPS request costs more than a datagram."""
    return prefer(r.relay_stun_rtt_s) or prefer(r.relay_https_rtt_s)


def text(r: Report) -> str:
    """Human-readable lines, in the order an operator reads them."""
    def yn(v: bool | None) -> str:
        return "unknown" if v is None else ("yes" if v else "no")

    lines = [
        f"NAT:                {r.nat}",
        f"UDP:                {yn(r.udp)}",
        f"IPv4:               {yn(r.ipv4)}" + (f", public {r.global_v4}" if r.global_v4 else ""),
        f"IPv6:               {yn(r.ipv6)}" + (f", public {r.global_v6}" if r.global_v6 else ""),
        *([f"QUIC address discovery: {r.qad}"] if r.qad else []),
        f"mapping varies by destination port: {yn(r.mapping_varies_by_dest_port)}",
        f"preserves ports:    {yn(r.preserves_port)}",
        f"hairpinning:        {yn(r.hairpin)}",
        f"port mapping:       {r.portmap or 'none'}" + (f" ({r.portmap_external})" if r.portmap_external else ""),
        f"PCP:                {yn(r.pcp)}",
        f"captive portal:     {yn(r.captive_portal)}",
    ]
    for url in dict.fromkeys([*r.relay_stun_rtt_s, *r.relay_https_rtt_s]):
        rtts = [f"{kind} {got[url] * 1000:.1f} ms" for kind, got in (("STUN", r.relay_stun_rtt_s),
                                                                     ("HTTPS", r.relay_https_rtt_s)) if url in got]
        lines.append(f"relay round trip:   {url} {', '.join(rtts)}"
                     + ("  (preferred)" if url == r.preferred_relay else ""))
    lines += [f"note:               {e}" for e in r.errors]
    return "\n".join(lines)
