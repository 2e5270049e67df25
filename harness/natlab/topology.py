"""NAT scenarios: an "internet" namespace, routers doing NAT with iptables, peers behind them.

    inet:  bridge "wan"  203.0.113.1/24  2001:db8::1/64   (servers: relay, mailbox, transit; v6 core router)
      router rN:  wan 203.0.113.(10+N)  2001:db8::(10+N)   |  lan bridge 192.168.N.1/24  2001:db8:N::1/64
        peer P behind rN:  eth0 192.168.N.(10+i)  2001:db8:N::(10+i)   (default routes via rN)
      public peer P:       eth0 203.0.113.(100+i)  2001:db8::(100+i)    (on the wan bridge, no NAT)

Every router is a typical home gateway: it switches LAN <-> LAN (the LAN is a bridge, and with
br_netfilter loaded bridged frames pass the FORWARD chain too), forwards LAN -> WAN, lets back only what conntrack matches
(ESTABLISHED,RELATED), drops unsolicited inbound packets silently (INPUT and FORWARD), and for IPv6
routes the LAN's /64 without NAT behind the same stateful rule. What differs is the NAT kind (`NATS`):

  eim        MASQUERADE: the kernel keeps the source port when it is free, one mapping per socket
             whatever the destination (endpoint-independent mapping, address+port-dependent filtering)
  symmetric  MASQUERADE --random-fully: a random port per connection (endpoint-dependent mapping)
  upnp       eim plus miniupnpd (UPnP IGD + NAT-PMP/PCP on the LAN) adding DNAT port forwards
  no-udp     eim for TCP, every UDP packet from the LAN dropped (a firewall that allows only TCP)
  tcp-servers eim for UDP; TCP from the LAN only to the lab's servers (a firewall that lets TCP out to
             known services only): no direct TCP between peers, not even by simultaneous open

Scenarios (`SCENARIOS`) name which NAT each peer sits behind; stage 2 adds its own to the same dict.
Addresses are documentation ranges (RFC 5737, RFC 3849); they exist only inside these namespaces.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from .rig import Lab

INET_V4, INET_V6 = "203.0.113.1", "2001:db8::1"
ISP_STUN_PORT = 3470  # the answerer miniupnpd asks at start-up (upnp.py)


@dataclass(frozen=True)
class Nat:
    kind: str
    random_ports: bool = False  # MASQUERADE --random-fully
    block_udp: bool = False
    tcp_to_servers_only: bool = False
    upnp: bool = False
    backend: str = "nft"  # iptables-nft, or iptables-legacy where miniupnpd's libiptc needs it


NATS = {
    "eim": Nat("eim"),
    "symmetric": Nat("symmetric", random_ports=True),
    "upnp": Nat("upnp", upnp=True, backend="legacy"),
    "no-udp": Nat("no-udp", block_udp=True),
    "tcp-servers": Nat("tcp-servers", tcp_to_servers_only=True),
}


@dataclass(frozen=True)
class Scenario:
    """peers: peer name -> NAT kind, or "public" for a host on the internet without NAT. Peers listed
    with the same `share` group sit behind one router (hairpin)."""
    name: str
    peers: dict[str, str]
    share: tuple[str, ...] = ()
    ipv6: bool = False  # give peers global IPv6 (stateful firewall, no NAT) as well
    about: str = ""


SCENARIOS = {s.name: s for s in [
    Scenario("eim", {"a": "eim", "b": "eim"},
             about="both peers behind port-preserving endpoint-independent NATs"),
    Scenario("symmetric", {"a": "symmetric", "b": "symmetric"},
             about="both peers behind port-randomising NATs: no direct IPv4 path"),
    Scenario("upnp", {"a": "upnp", "b": "symmetric"},
             about="a maps its port with UPnP/NAT-PMP; b behind a symmetric NAT dials it"),
    Scenario("no-udp", {"a": "no-udp", "b": "eim"},
             about="a's network drops UDP, so it cannot learn its address by STUN"),
    Scenario("udp-punch", {"a": "tcp-servers", "b": "tcp-servers"},
             about="TCP between the peers is blocked, UDP mappings are endpoint-independent: only a punched "
                   "UDP path is direct"),
    Scenario("hairpin", {"a": "eim", "b": "eim"}, share=("a", "b"),
             about="two peers behind one NAT"),
    Scenario("symmetric-v6", {"a": "symmetric", "b": "symmetric"}, ipv6=True,
             about="symmetric IPv4 NATs, global IPv6 behind stateful firewalls"),
]}


@dataclass
class Host:
    name: str
    ns: str
    v4: str
    v6: str | None
    nat: str  # NAT kind of its router, or "public"
    router: str | None = None  # router namespace


@dataclass
class Router:
    name: str
    ns: str
    nat: Nat
    wan_v4: str
    wan_v6: str
    lan_v4: str  # gateway address on the LAN
    index: int


@dataclass
class Topology:
    lab: Lab
    scenario: Scenario
    inet: str
    hosts: dict[str, Host] = field(default_factory=dict)
    routers: dict[str, Router] = field(default_factory=dict)

    @property
    def server_v4(self) -> str:
        return INET_V4

    @property
    def server_v6(self) -> str:
        return INET_V6


def _iptables_rules(nat: Nat) -> tuple[str, str]:
    """(IPv4 iptables-restore input, IPv6 ip6tables-restore input) for one router."""
    masq = "-A POSTROUTING -o wan -j MASQUERADE" + (" --random-fully" if nat.random_ports else "")
    upnp_nat = ":MINIUPNPD - [0:0]\n:MINIUPNPD-POSTROUTING - [0:0]\n-A PREROUTING -i wan -j MINIUPNPD\n" \
        if nat.upnp else ""
    upnp_fwd = ":MINIUPNPD - [0:0]\n" if nat.upnp else ""
    upnp_jump = "-A FORWARD -i wan -o lan -j MINIUPNPD\n" if nat.upnp else ""
    no_udp = "-A FORWARD -i lan -p udp -j DROP\n" if nat.block_udp else ""
    tcp4 = f"-A FORWARD -i lan -o wan -p tcp ! -d {INET_V4} -j DROP\n" if nat.tcp_to_servers_only else ""
    tcp6 = f"-A FORWARD -i lan -o wan -p tcp ! -d {INET_V6} -j DROP\n" if nat.tcp_to_servers_only else ""
    filt = textwrap.dedent("""\
        *filter
        :INPUT DROP [0:0]
        :FORWARD DROP [0:0]
        :OUTPUT ACCEPT [0:0]
        {upnp_fwd}-A INPUT -i lo -j ACCEPT
        -A INPUT -i lan -j ACCEPT
        -A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
        {icmp}{no_udp}-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
        -A FORWARD -i lan -o lan -j ACCEPT
        -A FORWARD -i lan -o wan -j ACCEPT
        {upnp_jump}COMMIT
        """)
    v4 = filt.format(upnp_fwd=upnp_fwd, icmp="", no_udp=no_udp + tcp4, upnp_jump=upnp_jump)
    v4 += f"*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" \
          f":POSTROUTING ACCEPT [0:0]\n{upnp_nat}{masq}\nCOMMIT\n"
    # IPv6 needs neighbour discovery to the router itself; forwarded traffic is stateful as above
    v6 = filt.format(upnp_fwd="", icmp="-A INPUT -p ipv6-icmp -j ACCEPT\n", no_udp=no_udp + tcp6, upnp_jump="")
    return v4, v6


def _veth(lab: Lab, ns_a: str, name_a: str, ns_b: str, name_b: str) -> None:
    lab.cmd("ip", "-n", ns_a, "link", "add", name_a, "type", "veth", "peer", "name", name_b, "netns", ns_b)


def _addr(lab: Lab, ns: str, dev: str, v4: str, v6: str | None) -> None:
    lab.cmd("ip", "-n", ns, "addr", "add", v4, "dev", dev)
    if v6:
        lab.cmd("ip", "-n", ns, "addr", "add", v6, "dev", dev, "nodad")
    lab.cmd("ip", "-n", ns, "link", "set", dev, "up")


def _sysctl(lab: Lab, ns: str, *settings: str) -> None:
    lab.run(ns, ["sysctl", "-q", "-w", *settings])


def build(lab: Lab, name: str) -> Topology:
    """Create the namespaces, links, addresses, routes and NAT rules of scenario `name`."""
    scenario = SCENARIOS[name]
    inet = lab.netns("inet")
    topo = Topology(lab, scenario, inet)
    _sysctl(lab, inet, "net.ipv6.conf.all.forwarding=1", "net.ipv6.conf.default.accept_dad=0")
    lab.cmd("ip", "-n", inet, "link", "add", "wan", "type", "bridge")
    _addr(lab, inet, "wan", f"{INET_V4}/24", f"{INET_V6}/64")

    router_of: dict[str, Router] = {}
    for peer, kind in scenario.peers.items():
        if kind == "public" or peer in router_of:
            continue
        router = _router(lab, topo, len(topo.routers) + 1, NATS[kind])
        for member in scenario.share if peer in scenario.share else (peer,):
            router_of[member] = router
    for i, peer in enumerate(scenario.peers, start=1):
        topo.hosts[peer] = _peer(lab, topo, peer, i, router_of.get(peer))
    return topo


def _router(lab: Lab, topo: Topology, n: int, nat: Nat) -> Router:
    ns = lab.netns(f"r{n}")
    _sysctl(lab, ns, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
            "net.ipv6.conf.default.accept_dad=0")
    _veth(lab, ns, "wan", topo.inet, f"r{n}")
    lab.cmd("ip", "-n", topo.inet, "link", "set", f"r{n}", "master", "wan", "up")
    r = Router(f"r{n}", ns, nat, f"203.0.113.{10 + n}", f"2001:db8::{10 + n:x}", f"192.168.{n}.1", n)
    _addr(lab, ns, "wan", f"{r.wan_v4}/24", f"{r.wan_v6}/64")
    lab.cmd("ip", "-n", ns, "link", "add", "lan", "type", "bridge")
    _addr(lab, ns, "lan", f"{r.lan_v4}/24", f"2001:db8:{n}::1/64")
    lab.cmd("ip", "-n", ns, "-6", "route", "add", "default", "via", INET_V6)
    lab.cmd("ip", "-n", topo.inet, "-6", "route", "add", f"2001:db8:{n}::/64", "via", r.wan_v6)
    v4, v6 = _iptables_rules(nat)
    tool = "iptables-legacy" if nat.backend == "legacy" else "iptables-nft"
    lab.run(ns, [f"{tool}-restore"], input=v4)
    lab.run(ns, [tool.replace("iptables", "ip6tables") + "-restore"], input=v6)
    topo.routers[r.name] = r
    return r


def _peer(lab: Lab, topo: Topology, name: str, i: int, router: Router | None) -> Host:
    ns = lab.netns(name)
    _sysctl(lab, ns, "net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.accept_dad=0")
    if router is None:
        _veth(lab, ns, "eth0", topo.inet, f"p{name}")
        lab.cmd("ip", "-n", topo.inet, "link", "set", f"p{name}", "master", "wan", "up")
        v4, v6 = f"203.0.113.{100 + i}", f"2001:db8::{100 + i:x}"
        _addr(lab, ns, "eth0", f"{v4}/24", f"{v6}/64")
        lab.cmd("ip", "-n", ns, "-6", "route", "add", "default", "via", INET_V6)
        return Host(name, ns, v4, v6, "public")
    n = router.index
    _veth(lab, ns, "eth0", router.ns, f"p{name}")
    lab.cmd("ip", "-n", router.ns, "link", "set", f"p{name}", "master", "lan", "up")
    v4 = f"192.168.{n}.{10 + i}"
    v6 = f"2001:db8:{n}::{10 + i:x}" if topo.scenario.ipv6 else None
    _addr(lab, ns, "eth0", f"{v4}/24", f"{v6}/64" if v6 else None)
    lab.cmd("ip", "-n", ns, "route", "add", "default", "via", router.lan_v4)
    if v6:
        lab.cmd("ip", "-n", ns, "-6", "route", "add", "default", "via", f"2001:db8:{n}::1")
    return Host(name, ns, v4, v6, router.nat.kind, router.ns)
