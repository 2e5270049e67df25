"""How clients reach the chart's services (expose.mode shared, ingress, separate): the generic wiring check
over the rendered manifests (every Service port's targetPort resolves to container ports of the pods its
selector matches; every public container port is reachable through exactly one public Service port), the
Ingress routes, the address sharing, and what NOTES.txt prints in each mode. Lint and strict validation
of the "ingress" value set run in test_chart.py with the others."""

from __future__ import annotations

import helm_python as helm
import pytest

from tests.deploy.chart_util import (
    CHART,
    KUBE_VERSIONS,
    check_wiring,
    endpoints,
    find,
    ingress_routes,
    one,
    pod_spec,
    render,
    validate,
)
from tests.deploy.test_chart import FULL, VALUE_SETS

HAPROXY = {"transit": {"replicas": 3, "scaling": "haproxy"}}
MESH = {"relay": {"replicas": 3, "mesh": {"enabled": True}}}

# Value sets the wiring check runs over, each in every mode.
WIRING_SETS = {
    "defaults": {},
    "ha": VALUE_SETS["ha"],
    "haproxy": HAPROXY,
    "mesh": MESH,
    "everything-on": VALUE_SETS["everything-on"],
    "nodeport": {"service": {"type": "NodePort"}},
    "udp-apart": {"expose": {"mixedProtocol": False}},
    "ha-udp-apart": {**VALUE_SETS["ha"], "expose": {"mixedProtocol": False}},  # ingress: no co-location needed
    "mailbox-only": {"transit": {"enabled": False}, "relay": {"enabled": False}},
    "qad-off": {"relay": {"qad": {"enabled": False}}},
}
MODES = ["shared", "ingress", "separate"]


def with_mode(values: dict, mode: str) -> dict:
    return {**values, "expose": {**values.get("expose", {}), "mode": mode}}


def pods(values: dict, component: str) -> int:
    transit = values.get("transit", {})
    if component == "transit" and transit.get("scaling") == "haproxy":
        return transit.get("haproxy", {}).get("replicas", 2)
    return values.get(component, {}).get("replicas", 1)


def refused_on_local(values: dict) -> bool:
    """Several components behind one Local Service, one of them with several pods (see check_wiring)."""
    expose, service = values.get("expose", {}), values.get("service", {})
    if expose.get("mode", "shared") == "separate" or service.get("type", "LoadBalancer") == "ClusterIP":
        return False
    if service.get("externalTrafficPolicy", "Local") != "Local":
        return False
    group = [c for c in ("mailbox", "transit", "relay") if values.get(c, {}).get("enabled", True)
             and not (c == "mailbox" and expose.get("mode") == "ingress")
             and not (c == "relay" and expose.get("mode") == "ingress" and expose.get("mixedProtocol") is False)]
    return len(group) > 1 and any(pods(values, c) > 1 for c in group)


def serves_qad(values: dict) -> bool:
    """The relay's QUIC address discovery is on (relay.qad.enabled), except behind an Ingress."""
    relay = values.get("relay", {})
    return (relay.get("enabled", True) and relay.get("qad", {}).get("enabled", True)
            and values.get("expose", {}).get("mode", "shared") != "ingress")


def front_ends(values: dict) -> set[str]:
    """The workloads that must take clients' connections for these values."""
    expected = set()
    if values.get("mailbox", {}).get("enabled", True):
        expected.add(f"{FULL}-mailbox")
    transit = values.get("transit", {})
    if transit.get("enabled", True):
        expected.add(f"{FULL}-transit-haproxy" if transit.get("scaling") == "haproxy" else f"{FULL}-transit")
    if values.get("relay", {}).get("enabled", True):
        expected.add(f"{FULL}-relay")
    return expected


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(WIRING_SETS))
def test_every_public_port_is_wired_once(name, mode):
    values = with_mode(WIRING_SETS[name], mode)
    if refused_on_local(values):
        with pytest.raises(helm.HelmError, match="checks node health per Service, not per port"):
            render(values)
        values = {**values, "service": {**values.get("service", {}), "externalTrafficPolicy": "Cluster"}}
    docs, _ = render(values)
    public = check_wiring(docs, front_ends(values))
    # each public entry point leads to one component (a named port is defined by one workload kind)
    for key, targets in public.items():
        assert len({w for w, _ in targets}) == 1, (key, targets)
    services = {s for s, _ in public}
    # the QAD port is a container port of the relay exactly when it is served (the check above then
    # requires it to be public exactly once)
    qad = [(s, port) for (s, port), targets in public.items() if (f"{FULL}-relay", "relay-qad") in targets]
    assert len(qad) == (1 if serves_qad(values) else 0), qad
    udp_apart = values["expose"].get("mixedProtocol") is False and values.get("relay", {}).get("enabled", True)
    if mode == "shared":
        # one address: one Service, plus the UDP Service that shares its address when protocols are apart
        assert services == ({FULL, f"{FULL}-stun"} if udp_apart else {FULL})
    elif mode == "ingress":
        assert not services - {FULL, f"{FULL}-http", f"{FULL}-stun"}
    for doc in docs:  # every mode validates strictly against the newest schema (all value sets: test_chart)
        if doc["kind"] in ("Service", "Ingress", "NetworkPolicy"):
            validate(doc, KUBE_VERSIONS[-1])


def test_the_check_catches_a_duplicate_and_a_dangling_port():
    docs, _ = render({})
    expected = front_ends({})
    check_wiring(docs, expected)
    shared = one(docs, "Service", FULL)
    ports = shared["spec"]["ports"]
    twice = dict(ports[0], name="again", port=14000)
    shared["spec"]["ports"] = ports + [twice]
    with pytest.raises(AssertionError, match="public through"):
        check_wiring(docs, expected)
    shared["spec"]["ports"] = ports[1:]  # the mailbox port left out
    with pytest.raises(AssertionError, match="workloads reached from outside"):
        check_wiring(docs, expected)
    for name in ("stun", "relay-qad"):  # one port of a reached workload
        shared["spec"]["ports"] = [p for p in ports if p["name"] != name]
        with pytest.raises(AssertionError, match=f"'{name}'.* is public through None"):
            check_wiring(docs, expected)
    shared["spec"]["ports"] = ports + [dict(ports[0], name="nowhere", port=1, targetPort="websocket")]
    with pytest.raises(AssertionError, match="reaches no pod"):
        check_wiring(docs, expected)


def test_the_check_catches_components_that_may_land_on_different_nodes():
    docs, _ = render({})
    check_wiring(docs, front_ends({}))  # single pods, held on one node
    relay = one(docs, "Deployment", f"{FULL}-relay")
    del pod_spec(relay)["affinity"]
    with pytest.raises(AssertionError, match=f"{FULL}-relay is not held on the node"):
        check_wiring(docs, front_ends({}))
    docs, _ = render({"service": {"externalTrafficPolicy": "Cluster"}})  # every node forwards: no need
    assert all("affinity" not in pod_spec(w) for w in find(docs, "Deployment"))
    check_wiring(docs, front_ends({}))
    with pytest.raises(helm.HelmError, match="With several relay pods use expose.mode separate"):
        render(MESH)


def test_shared_is_the_default_and_carries_every_port_on_one_address():
    docs, _ = render({})
    public = [s for s in find(docs, "Service") if s["spec"]["type"] != "ClusterIP"]
    assert [s["metadata"]["name"] for s in public] == [FULL]
    spec = public[0]["spec"]
    assert spec["type"] == "LoadBalancer" and spec["externalTrafficPolicy"] == "Local"
    assert [(p["name"], p["port"], p["protocol"]) for p in spec["ports"]] == [
        ("mailbox-ws", 4000, "TCP"), ("transit", 4001, "TCP"), ("transit-ws", 4002, "TCP"),
        ("relay-https", 443, "TCP"), ("stun", 3478, "UDP"), ("relay-qad", 7842, "UDP")]
    assert spec["selector"]["burrow-public"] == "true"
    # Redis and transit replicas behind HAProxy never carry the label the shared Service selects
    docs, _ = render(VALUE_SETS["ha"])
    labelled = {w["metadata"]["name"] for w in find(docs, "Deployment") + find(docs, "StatefulSet")
                if w["spec"]["template"]["metadata"]["labels"].get("burrow-public") == "true"}
    assert labelled == {f"{FULL}-mailbox", f"{FULL}-transit-haproxy", f"{FULL}-relay"}


def test_stun_apart_shares_the_address_by_ip_and_annotation():
    values = {"expose": {"mixedProtocol": False}, "service": {
        "loadBalancerIP": "203.0.113.7", "annotations": {"metallb.universe.tf/allow-shared-ip": "burrow"}}}
    docs, notes = render(values)
    tcp, udp = one(docs, "Service", FULL), one(docs, "Service", f"{FULL}-stun")
    assert {p["protocol"] for p in tcp["spec"]["ports"]} == {"TCP"}
    assert [(p["name"], p["protocol"]) for p in udp["spec"]["ports"]] == [("stun", "UDP"), ("relay-qad", "UDP")]
    for s in (tcp, udp):
        assert s["spec"]["loadBalancerIP"] == "203.0.113.7"
        assert s["metadata"]["annotations"] == {"metallb.universe.tf/allow-shared-ip": "burrow"}
    assert f"STUN and QAD (UDP) are on Service {FULL}-stun, which must get the same address" in notes
    docs, _ = render({"service": {"type": "NodePort", "loadBalancerIP": "203.0.113.7"}})
    assert "loadBalancerIP" not in one(docs, "Service", FULL)["spec"]  # only for LoadBalancer


@pytest.mark.parametrize("mode, mixed, service", [
    ("shared", True, FULL), ("shared", False, f"{FULL}-stun"),
    ("separate", True, f"{FULL}-relay"), ("separate", False, f"{FULL}-stun"),
])
def test_qad_is_served_next_to_the_relays_https(mode, mixed, service):
    """iroh endpoints look for QUIC address discovery at the relay URL's host, on quic_port: the relay
    listens there (BURROW_RELAY_QAD_PORT), and the Service on HTTPS's address (or the UDP Service that
    must share it) carries the port, with a nodePort when one is set."""
    values = {"publicHost": "burrow.example.org", "service": {"type": "NodePort"},
              "expose": {"mode": mode, "mixedProtocol": mixed}, "relay": {"qad": {"port": 7900, "nodePort": 30790}}}
    docs, notes = render(values)
    relay = pod_spec(one(docs, "Deployment", f"{FULL}-relay"))["containers"][0]
    assert {e["name"]: e.get("value") for e in relay["env"]}["BURROW_RELAY_QAD_PORT"] == "7900"
    assert {"name": "relay-qad", "containerPort": 7900, "protocol": "UDP"} in relay["ports"]
    public = check_wiring(docs, front_ends(values))
    assert [key for key, targets in public.items() if (f"{FULL}-relay", "relay-qad") in targets] == [
        (service, "relay-qad")]
    [port] = [p for p in one(docs, "Service", service)["spec"]["ports"] if p["name"] == "relay-qad"]
    assert port == {"name": "relay-qad", "port": 7900, "targetPort": "relay-qad", "protocol": "UDP", "nodePort": 30790}
    policy = one(docs, "NetworkPolicy", f"{FULL}-relay")["spec"]["ingress"][0]
    assert "from" not in policy and {"port": 7900, "protocol": "UDP"} in policy["ports"]
    assert "QAD         burrow.example.org:7900 (UDP, iroh's QUIC address discovery: quic_port 7900" in notes
    assert "burrow netcheck https://burrow.example.org --qad-port 7900 --insecure" in notes
    assert ("that Service must get the address of" in notes) == (mode == "separate" and not mixed)


@pytest.mark.parametrize("values", [
    {"expose": {"mode": "ingress"}},  # no certificate in the relay, no UDP on the Ingress's address
    {"relay": {"qad": {"enabled": False}}},
])
def test_qad_off(values):
    docs, notes = render(values)
    [relay] = find(docs, "Deployment", f"{FULL}-relay") + find(docs, "StatefulSet", f"{FULL}-relay")
    container = pod_spec(relay)["containers"][0]
    assert "BURROW_RELAY_QAD_PORT" not in {e["name"] for e in container["env"]}
    assert "relay-qad" not in {p["name"] for p in container["ports"]}
    assert not [p for s in find(docs, "Service") for p in s["spec"]["ports"] if p["name"] == "relay-qad"]
    policy = one(docs, "NetworkPolicy", f"{FULL}-relay")["spec"]["ingress"][0]
    assert {"port": 7842, "protocol": "UDP"} not in policy["ports"]
    assert "QAD  " not in notes and "--qad-port" not in notes
    assert ("QUIC address discovery (relay.qad) is off behind the Ingress" in notes) == ("expose" in values)


def test_ingress_routes_every_http_endpoint_to_its_server():
    values = VALUE_SETS["ingress"]
    docs, _ = render(values)
    [ing] = find(docs, "Ingress")
    assert ing["spec"]["ingressClassName"] == "nginx"
    assert ing["metadata"]["annotations"]["cert-manager.io/cluster-issuer"] == "letsencrypt"
    assert ing["spec"]["tls"] == [{"secretName": f"{FULL}-tls", "hosts": ["burrow.example.org"]}]
    routes = {(host, path): endpoints(docs, s, p) for host, path, s, p in ingress_routes(docs)}
    relay = [(f"{FULL}-relay", "relay-http")]
    assert routes == {
        ("burrow.example.org", "/v1"): [(f"{FULL}-mailbox", "mailbox-ws")],
        ("burrow.example.org", "/transit"): [(f"{FULL}-transit-haproxy", "transit-ws")],
        # the relay's own paths (packet_relay/http_routes.py, iroh/service.py)
        **{("burrow.example.org", p): relay for p in ("/derp", "/generate_204", "/relay", "/ping", "/robots.txt", "/")},
    }
    # transit TCP and STUN stay on LoadBalancer Services; the HTTP Service is ClusterIP (the Ingress's)
    assert one(docs, "Service", f"{FULL}-http")["spec"]["type"] == "ClusterIP"
    assert [p["name"] for p in one(docs, "Service", FULL)["spec"]["ports"]] == ["transit"]
    assert [p["name"] for p in one(docs, "Service", f"{FULL}-stun")["spec"]["ports"]] == ["stun"]
    # the relay serves plain HTTP there and no HTTPS: no certificate to manage in the pods
    sts = one(docs, "StatefulSet", f"{FULL}-relay")
    container = pod_spec(sts)["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["BURROW_RELAY_HTTPS_PORT"] == "-1" and env["BURROW_RELAY_HTTP_PORT"] == "8080"
    assert env["BURROW_RELAY_DEV_TLS"] == "false" and "BURROW_RELAY_TLS_CERT" not in env
    assert {p["name"] for p in container["ports"]} == {"relay-http", "stun", "admin"}
    policy = one(docs, "NetworkPolicy", f"{FULL}-relay")["spec"]["ingress"][0]
    assert "from" not in policy and {"port": 8080, "protocol": "TCP"} in policy["ports"]

    # no host anywhere: one rule for every host; TLS off; a Secret of your own
    docs, _ = render({"expose": {"mode": "ingress", "ingress": {"tls": {"enabled": False}}}})
    [ing] = find(docs, "Ingress")
    assert "tls" not in ing["spec"] and [("host" in r) for r in ing["spec"]["rules"]] == [False]
    docs, _ = render({"expose": {"mode": "ingress", "ingress": {"hosts": ["a.example.org", "b.example.org"],
                                                                 "tls": {"secretName": "mine"}}}})
    [ing] = find(docs, "Ingress")
    assert [r["host"] for r in ing["spec"]["rules"]] == ["a.example.org", "b.example.org"]
    assert ing["spec"]["tls"] == [{"secretName": "mine", "hosts": ["a.example.org", "b.example.org"]}]


def test_bad_expose_values_are_refused():
    with helm.Chart.load(CHART) as chart:
        for bad in ({"expose": {"mode": "nodeport"}}, {"expose": {"ingress": {"transitPath": "transit"}}},
                    {"expose": {"mixedProtocol": "yes"}}, {"expose": {"ingress": {"tls": {"secret": "x"}}}}):
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema(chart.merge_values(bad))


@pytest.mark.parametrize("mode, expected, absent", [
    ("shared", ["Service demo-burrow (LoadBalancer) carries every public port",
                "kept on one node (mailbox, transit, relay)",
                "--relay-url ws://burrow.example.org:4000/v1", "--transit-helper tcp:burrow.example.org:4001",
                "transit over WebSocket: ws://burrow.example.org:4002",
                "relay URL   https://burrow.example.org/derp", "iroh relay  https://burrow.example.org (",
                "STUN        burrow.example.org:3478 (UDP)",
                "burrow relay-probe https://burrow.example.org --stun-port 3478 --insecure"], ["HOST"]),
    ("ingress", ["Ingress demo-burrow: the mailbox (/v1)", "Service demo-burrow (LoadBalancer): transit TCP",
                 "--relay-url wss://burrow.example.org/v1", "--transit-helper tcp:l4.example.org:4001",
                 "wormhole --relay-url wss://burrow.example.org/v1 --transit-helper tcp:l4.example.org:4001 send",
                 "transit over WebSocket: wss://burrow.example.org/transit",
                 "relay URL   https://burrow.example.org/derp", "STUN        l4.example.org:3478 (UDP)",
                 "burrow relay-probe https://burrow.example.org --stun-port 3478 --stun-host l4.example.org",
                 'pass "Upgrade: DERP" through'], ["HOST", "--insecure", "ws://burrow.example.org:4000"]),
    ("separate", ["one Service per component", "demo-burrow-mailbox (--relay-url)",
                  "--relay-url ws://burrow.example.org:4000/v1",
                  "relay URL   https://burrow.example.org/derp"], ["ws://HOST", "tcp:HOST", "https://HOST"]),
])
def test_notes_print_what_is_exposed(mode, expected, absent):
    values = {"publicHost": "burrow.example.org",
              "expose": {"mode": mode, "ingress": {"serviceHost": "l4.example.org"}}}
    _, notes = render(values)
    for line in expected:
        assert line in notes, line
    for text in absent:
        assert text not in notes, text


def test_notes_send_nodeport_clients_to_the_nodes_that_run_the_pods():
    _, notes = render({"service": {"type": "NodePort"}})
    assert "kubectl get pods -n burrow -l app.kubernetes.io/instance=demo -o wide" in notes
    assert "only they answer" in notes
    _, notes = render({"service": {"type": "NodePort", "externalTrafficPolicy": "Cluster"}})
    assert "any node's external address" in notes


def test_notes_say_how_to_find_the_ingress_and_service_addresses():
    _, notes = render({"expose": {"mode": "ingress", "ingress": {"tls": {"enabled": False}}}})
    assert f"kubectl get ingress -n burrow {FULL}" in notes and f"kubectl get svc -n burrow {FULL}" in notes
    assert "--relay-url ws://HOST/v1" in notes and "--transit-helper tcp:SERVICE_HOST:4001" in notes
    assert "relay URL   http://HOST/derp" in notes
