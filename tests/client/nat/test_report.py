"""client/nat/report.py: the NAT kind named from netcheck's observations, the preferred relay, the text."""

import pytest

from burrow.client.nat.report import Report, classify, prefer, preferred_relay, split_hostport, text

LAN = ["192.168.1.11"]


@pytest.mark.parametrize("report,kind", [
    (Report(local_v4=LAN), "no-udp"),  # no STUN answer at all
    (Report(udp=True, ipv6=True, global_v6="[2001:db8:1::b]:4000", local_v4=LAN), "unknown"),  # IPv6 only
    (Report(udp=True, ipv4=True, global_v4="192.168.1.11:4000", local_v4=LAN), "none"),  # mapped = ours
    (Report(udp=True, ipv4=True, global_v4="203.0.113.11:4000", local_v4=LAN,
            mapping_varies_by_dest_port=True), "symmetric"),
    (Report(udp=True, ipv4=True, global_v4="203.0.113.11:4000", local_v4=LAN,
            mapping_varies_by_dest_port=False), "eim"),
    # one STUN port only: the mapping kind is unknown, and eim is the optimistic reading (hints are tried)
    (Report(udp=True, ipv4=True, global_v4="203.0.113.11:4000", local_v4=LAN), "eim"),
])
def test_classify(report, kind):
    assert classify(report) == kind


def test_split_hostport():
    assert split_hostport("203.0.113.11:4000") == ("203.0.113.11", 4000)
    assert split_hostport("[2001:db8::1]:3478") == ("2001:db8::1", 3478)


def test_prefer_lowest_latency_first_listed_on_ties():
    assert prefer({}) is None
    assert prefer({"https://a": 0.030, "https://b": 0.010, "https://c": 0.010}) == "https://b"


def test_preferred_relay_by_stun_else_https_never_mixed():
    both = Report(relay_stun_rtt_s={"https://a": 0.020}, relay_https_rtt_s={"https://a": 0.025, "https://b": 0.005})
    assert preferred_relay(both) == "https://a"  # b's HTTPS is faster, but a answered STUN
    assert preferred_relay(Report(relay_https_rtt_s={"https://a": 0.025, "https://b": 0.005})) == "https://b"
    assert preferred_relay(Report()) is None


def test_text_names_every_observation():
    r = Report(udp=True, ipv4=True, global_v4="203.0.113.11:4000", local_v4=LAN, mapping_varies_by_dest_port=False,
               preserves_port=True, hairpin=False, portmap="nat-pmp", portmap_external="203.0.113.11:4000",
               captive_portal=False, relay_stun_rtt_s={"https://relay.example:8443": 0.0123},
               relay_https_rtt_s={"https://relay.example:8443": 0.0151},
               preferred_relay="https://relay.example:8443", nat="eim", errors=["no STUN answer on x:3479"])
    out = text(r)
    for line in ["NAT:                eim", "IPv4:               yes, public 203.0.113.11:4000",
                 "IPv6:               no", "mapping varies by destination port: no", "preserves ports:    yes",
                 "hairpinning:        no", "port mapping:       nat-pmp (203.0.113.11:4000)",
                 "captive portal:     no", "relay round trip:   https://relay.example:8443 STUN 12.3 ms, HTTPS 15.1 ms  (preferred)",
                 "note:               no STUN answer on x:3479"]:
        assert line in out.splitlines(), line
