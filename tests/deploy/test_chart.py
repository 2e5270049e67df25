"""The Helm chart: `helm lint --strict` and `helm template` (via helm-python-sdk's bundled Helm engine) with
several value sets, every rendered manifest validated with kubernetes-validate --strict, and the
properties operators rely on checked in the rendered objects."""

from __future__ import annotations

import base64
import json

import helm_python as helm
import pytest
import yaml

from tests.deploy.chart_util import (
    CHART,
    CRD_KINDS,
    KUBE_VERSIONS,
    endpoints,
    env_of,
    find,
    lint,
    one,
    pod_spec,
    render,
    validate,
)

FULL = "demo-burrow"

VALUE_SETS = {
    "defaults": {},
    # One Service per component, as installs made before expose.mode had.
    "nodeport-secret-tls": {
        "expose": {"mode": "separate"},
        "publicHost": "relay.example.org",
        "service": {"type": "NodePort", "externalTrafficPolicy": "Cluster"},
        "mailbox": {"service": {"nodePort": 30400}, "env": {"BURROW_MAILBOX_MOTD": "hello",
                                                            "BURROW_MAILBOX_BLUR_USAGE": 3600}},
        "transit": {"replicas": 3, "scaling": "haproxy",
                    "service": {"nodePort": 30401, "websocketNodePort": 30402}},
        "relay": {"tls": {"mode": "secret", "secretName": "relay-cert"}, "privateKeySecret": "relay-key",
                  "stunService": {"nodePort": 30478}, "env": {"BURROW_RELAY_MAX_CONNECTIONS": 5000}},
        "image": {"repository": "registry.example.org/burrow", "tag": "1.2.3", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
    },
    "everything-on": {
        "publicHost": "burrow.example.org",
        # several pods per component behind the one shared Service: only with Cluster (see test_chart_expose)
        "service": {"externalTrafficPolicy": "Cluster"},
        "relay": {"tls": {"mode": "certManager"}, "replicas": 3, "mesh": {"enabled": True}},
        "eventLogs": {"persistence": {"enabled": True, "storageClass": "nfs"}},
        "report": {"enabled": True, "timeZone": "Etc/UTC", "extraArgs": ["--shuffle-partitions", "8"]},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        "grafanaDashboard": {"enabled": True, "namespace": "monitoring",
                             "annotations": {"grafana_folder": "Burrow"}},
        "networkPolicy": {"restrictEgress": True,
                          "extraEgress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]},
        "mailbox": {"persistence": {"existingClaim": "mailbox-db"}},
        "transit": {"replicas": 2, "scaling": "redis",
                    "redis": {"url": "redis://redis:6379/0", "peerSecretName": "transit-peer"}},
        "commonLabels": {"team": "net"},
        "podAnnotations": {"example.org/owner": "net"},
    },
    "clusterip-mailbox-only": {
        "service": {"type": "ClusterIP"},
        "transit": {"enabled": False},
        "relay": {"enabled": False},
        "mailbox": {"persistence": {"enabled": False}},
        "eventLogs": {"enabled": False},
        "podDisruptionBudget": {"enabled": False},
        "networkPolicy": {"enabled": False},
        "serviceAccount": {"create": False},
        "admin": {"prometheusAnnotations": False},
    },
    # The high-availability values operators install as they are (helm/burrow/values-ha.yaml).
    "ha": yaml.safe_load((CHART / "values-ha.yaml").read_text()),
    # HTTP and WebSocket through an Ingress (cert-manager fills its TLS Secret), STUN on its own Service.
    "ingress": {
        "publicHost": "burrow.example.org",
        "expose": {"mode": "ingress", "mixedProtocol": False,
                   "ingress": {"className": "nginx", "serviceHost": "l4.example.org",
                               "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt",
                                               "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600"}}},
        "service": {"loadBalancerIP": "203.0.113.7",
                    "annotations": {"metallb.universe.tf/allow-shared-ip": "burrow"}},
        "transit": {"replicas": 3, "scaling": "haproxy"},
        "relay": {"replicas": 2, "mesh": {"enabled": True}},
    },
}


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request):
    values = VALUE_SETS[request.param]
    docs, notes = render(values)
    return request.param, values, docs, notes


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
@pytest.mark.parametrize("kube_version", [KUBE_VERSIONS[0], None])
def test_lint_strict(name, kube_version):
    report = lint(VALUE_SETS[name], kube_version)
    assert report["errors"] == [], report
    # Severity 2 = warning, 3 = error; 1 (info) is only "icon is recommended".
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report["messages"]


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_manifest_validates_strictly(rendered, kube_version):
    _name, _values, docs, _notes = rendered
    assert docs
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            continue  # no OpenAPI schema offline: see test_crd_objects
        validate(doc, kube_version)


def test_validator_catches_a_typo():
    # The strict validation above means something only if it rejects unknown fields.
    docs, _ = render({})
    deployment = dict(one(docs, "Deployment", f"{FULL}-mailbox"))
    container = dict(pod_spec(deployment)["containers"][0], readinessprobe={})
    deployment["spec"] = {**deployment["spec"], "template": {
        **deployment["spec"]["template"],
        "spec": {**pod_spec(deployment), "containers": [container]}}}
    with pytest.raises(Exception, match="readinessprobe"):
        validate(deployment, KUBE_VERSIONS[-1])


def test_workloads_are_hardened_and_probed(rendered):
    _name, _values, docs, _notes = rendered
    workloads = find(docs, "Deployment") + find(docs, "StatefulSet") + find(docs, "CronJob")
    assert workloads
    for w in workloads:
        spec = pod_spec(w)
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001
        volumes = {v["name"]: v for v in spec["volumes"]}
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            assert "emptyDir" in volumes[mounts["/tmp"]]
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
            if w["kind"] in ("Deployment", "StatefulSet") and c["name"] != "redis":  # Redis: test_chart_ha
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
                    assert c[probe]["httpGet"] == {"path": path, "port": "admin"}
                assert "admin" in ports


def test_mailbox_keeps_one_writer_on_a_claim():
    docs, _ = render({})
    mailbox = one(docs, "Deployment", f"{FULL}-mailbox")
    assert mailbox["spec"]["replicas"] == 1
    assert mailbox["spec"]["strategy"] == {"type": "Recreate"}
    claim = one(docs, "PersistentVolumeClaim", f"{FULL}-mailbox")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    data = {v["name"]: v for v in pod_spec(mailbox)["volumes"]}["data"]
    assert data["persistentVolumeClaim"]["claimName"] == f"{FULL}-mailbox"
    env = env_of(pod_spec(mailbox)["containers"][0])
    assert env["BURROW_MAILBOX_DB"] == "/var/lib/burrow/mailbox.sqlite"
    assert env["BURROW_MAILBOX_EVENT_LOG"] == "/var/log/burrow/mailbox-$(POD_NAME).jsonl"

    docs, _ = render({"mailbox": {"persistence": {"existingClaim": "old-db"}}})
    assert not find(docs, "PersistentVolumeClaim")
    data = {v["name"]: v for v in pod_spec(one(docs, "Deployment", f"{FULL}-mailbox"))["volumes"]}["data"]
    assert data["persistentVolumeClaim"]["claimName"] == "old-db"


def test_separate_services_have_the_right_kinds_and_protocols():
    separate = {"expose": {"mode": "separate"}}
    docs, _ = render(separate)
    by_name = {s["metadata"]["name"]: s["spec"] for s in find(docs, "Service")}
    assert [(p["port"], p["protocol"]) for p in by_name[f"{FULL}-mailbox"]["ports"]] == [(4000, "TCP")]
    assert [(p["port"], p["protocol"]) for p in by_name[f"{FULL}-transit"]["ports"]] == [
        (4001, "TCP"), (4002, "TCP")]
    # QUIC address discovery answers at the relay URL's address: a mixed-protocol HTTPS Service
    assert [(p["port"], p["protocol"]) for p in by_name[f"{FULL}-relay"]["ports"]] == [(443, "TCP"), (7842, "UDP")]
    assert [(p["port"], p["protocol"]) for p in by_name[f"{FULL}-stun"]["ports"]] == [(3478, "UDP")]
    for name in ("mailbox", "transit", "relay", "stun"):
        assert by_name[f"{FULL}-{name}"]["type"] == "LoadBalancer"
        assert by_name[f"{FULL}-{name}"]["externalTrafficPolicy"] == "Local"
    for name in ("mailbox", "transit", "relay"):  # admin ports never leave the cluster
        admin = by_name[f"{FULL}-{name}-admin"]
        assert admin["type"] == "ClusterIP"
        assert [p["name"] for p in admin["ports"]] == ["admin"]
    relay = pod_spec(one(docs, "Deployment", f"{FULL}-relay"))["containers"][0]
    assert {p["name"]: p["protocol"] for p in relay["ports"]} == {"relay-https": "TCP", "stun": "UDP",
                                                                  "relay-qad": "UDP", "admin": "TCP"}

    docs, _ = render(VALUE_SETS["nodeport-secret-tls"])
    by_name = {s["metadata"]["name"]: s["spec"] for s in find(docs, "Service")}
    assert by_name[f"{FULL}-mailbox"]["type"] == "NodePort"
    assert by_name[f"{FULL}-mailbox"]["ports"][0]["nodePort"] == 30400
    assert [p["nodePort"] for p in by_name[f"{FULL}-transit"]["ports"]] == [30401, 30402]
    assert by_name[f"{FULL}-stun"]["ports"][0]["nodePort"] == 30478
    assert "nodePort" not in by_name[f"{FULL}-relay"]["ports"][0]

    docs, _ = render({**separate, "service": {"type": "ClusterIP"}, "relay": {"stunService": {"type": "LoadBalancer"}}})
    by_name = {s["metadata"]["name"]: s["spec"] for s in find(docs, "Service")}
    assert by_name[f"{FULL}-mailbox"]["type"] == "ClusterIP"
    assert "externalTrafficPolicy" not in by_name[f"{FULL}-mailbox"]
    assert by_name[f"{FULL}-stun"]["type"] == "LoadBalancer"


def test_relay_tls_modes():
    docs, _ = render({})
    env = env_of(pod_spec(one(docs, "Deployment", f"{FULL}-relay"))["containers"][0])
    assert env["BURROW_RELAY_DEV_TLS"] == "true" and "BURROW_RELAY_TLS_CERT" not in env
    assert not find(docs, "Certificate")

    docs, _ = render(VALUE_SETS["nodeport-secret-tls"])
    spec = pod_spec(one(docs, "Deployment", f"{FULL}-relay"))
    env = env_of(spec["containers"][0])
    assert env["BURROW_RELAY_DEV_TLS"] == "false"
    assert env["BURROW_RELAY_TLS_CERT"] == "/etc/burrow/tls/tls.crt"
    assert env["BURROW_RELAY_TLS_KEY"] == "/etc/burrow/tls/tls.key"
    assert env["BURROW_RELAY_KEY_FILE"] == "/etc/burrow/relay-key/relay.key"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "relay-cert"
    assert volumes["relay-key"]["secret"]["secretName"] == "relay-key"

    docs, _ = render(VALUE_SETS["everything-on"])
    cert = one(docs, "Certificate", f"{FULL}-relay")
    assert cert["spec"]["dnsNames"] == ["burrow.example.org"]
    volumes = {v["name"]: v for v in pod_spec(one(docs, "StatefulSet", f"{FULL}-relay"))["volumes"]}  # meshed
    assert volumes["tls"]["secret"]["secretName"] == cert["spec"]["secretName"]


def test_bad_values_are_refused():
    with helm.Chart.load(CHART) as chart:
        for bad in ({"relay": {"tls": {"mode": "secret"}}},          # secret mode without a Secret
                    {"service": {"type": "Ingress"}},
                    {"mailbox": {"env": {"MOTD": "x"}}},               # not a BURROW_MAILBOX_* name
                    {"transit": {"replicas": -1}},
                    {"unknownKey": True}):
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema(chart.merge_values(bad))
    with pytest.raises(helm.HelmError, match="eventLogs.persistence.enabled"):
        render({"report": {"enabled": True}})
    with pytest.raises(helm.HelmError, match="publicHost"):
        render({"relay": {"tls": {"mode": "certManager"}}})


def test_transit_replicas_need_the_haproxy_front_end_or_redis():
    with pytest.raises(helm.HelmError, match="transit.replicas > 1 needs transit.scaling: haproxy or redis"):
        render({"transit": {"replicas": 2}})
    with pytest.raises(helm.HelmError, match="transit.scaling: redis needs transit.redis.url"):
        render({"transit": {"replicas": 2, "scaling": "redis"}})
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(chart.merge_values({"transit": {"scaling": "dns"}}))

    docs, _ = render({})  # one replica: a Deployment, no front end
    assert one(docs, "Deployment", f"{FULL}-transit")["spec"]["replicas"] == 1
    assert not find(docs, "StatefulSet") and not find(docs, "Deployment", f"{FULL}-transit-haproxy")

    # two HAProxy pods behind the shared Service: Cluster policy (test_chart_expose)
    docs, _ = render({"transit": {"replicas": 3, "scaling": "haproxy"}, "service": {"externalTrafficPolicy": "Cluster"}})
    sts = one(docs, "StatefulSet", f"{FULL}-transit")
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] == f"{FULL}-transit-headless"
    assert env_of(pod_spec(sts)["containers"][0])["BURROW_TRANSIT_PROXY_PROTOCOL"] == "true"
    headless = one(docs, "Service", f"{FULL}-transit-headless")["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    front = one(docs, "Deployment", f"{FULL}-transit-haproxy")
    assert front["spec"]["replicas"] == 2
    # clients reach HAProxy, never the replicas behind it
    assert endpoints(docs, one(docs, "Service", FULL), {"port": 4001, "targetPort": "transit"}) == [
        (f"{FULL}-transit-haproxy", "transit")]
    config = one(docs, "ConfigMap", f"{FULL}-transit-haproxy")["data"]["haproxy.cfg"]
    for line in ("tcp-request content set-var(txn.token) req.payload(13,64)", "balance hash var(txn.token)",
                 "hash-type consistent", "send-proxy-v2"):
        assert line in config
    for i in range(3):
        name = f"{FULL}-transit-{i}.{FULL}-transit-headless.burrow.svc.cluster.local"
        assert f"server transit-{i} {name}:4001" in config and f"server transit-{i} {name}:4002" in config
    assert "transit-3" not in config

    docs, _ = render(VALUE_SETS["everything-on"])  # scaling: redis
    transit = one(docs, "Deployment", f"{FULL}-transit")
    container = pod_spec(transit)["containers"][0]
    env = env_of(container)
    assert env["BURROW_TRANSIT_REDIS_URL"] == "redis://redis:6379/0"
    assert env["BURROW_TRANSIT_ADVERTISE_ADDRESS"] == "$(POD_IP):4003"
    assert env["BURROW_TRANSIT_PEER_SECRET_FILE"] == "/etc/burrow/peer/peer-secret"
    assert env["BURROW_TRANSIT_PEER_POOL_SIZE"] == "8"
    assert {"name": "peer", "containerPort": 4003, "protocol": "TCP"} in container["ports"]
    volumes = {v["name"]: v for v in pod_spec(transit)["volumes"]}
    assert volumes["peer-secret"]["secret"]["secretName"] == "transit-peer"
    assert endpoints(docs, one(docs, "Service", FULL), {"port": 4001, "targetPort": "transit"}) == [
        (f"{FULL}-transit", "transit")]
    peer_rule = one(docs, "NetworkPolicy", f"{FULL}-transit")["spec"]["ingress"][1]
    assert peer_rule["ports"] == [{"port": 4003, "protocol": "TCP"}]
    assert peer_rule["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "transit"


def test_optional_objects():
    docs, _ = render(VALUE_SETS["everything-on"])
    monitor = one(docs, "ServiceMonitor", FULL)
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"][0]["port"] == "admin"
    assert monitor["spec"]["selector"]["matchLabels"]["burrow-admin"] == "true"

    dashboard = one(docs, "ConfigMap", f"{FULL}-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert json.loads(dashboard["data"]["burrow.json"])["panels"]

    cron = one(docs, "CronJob", f"{FULL}-report")
    assert cron["spec"]["timeZone"] == "Etc/UTC"
    container = pod_spec(cron)["containers"][0]
    assert container["image"] == "burrow-report:0.1.0"
    assert container["args"] == ["--logs", "/var/log/burrow/*.jsonl", "--out", "/var/log/burrow/report",
                                 "--driver-memory", "1g", "--shuffle-partitions", "8"]
    claim = one(docs, "PersistentVolumeClaim", f"{FULL}-logs")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "nfs"
    for w in find(docs, "Deployment") + [cron]:  # every pod shares the one log claim
        logs = {v["name"]: v for v in pod_spec(w)["volumes"]}["logs"]
        assert logs["persistentVolumeClaim"]["claimName"] == f"{FULL}-logs"

    for policy in find(docs, "NetworkPolicy"):
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        assert {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]} in policy["spec"]["egress"]

    docs, _ = render(VALUE_SETS["clusterip-mailbox-only"])
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == ["Deployment", "Service"]
    assert [d["metadata"]["name"] for d in find(docs, "Deployment")] == [f"{FULL}-mailbox"]
    spec = pod_spec(one(docs, "Deployment", f"{FULL}-mailbox"))
    assert spec["serviceAccountName"] == "default"
    assert "BURROW_MAILBOX_EVENT_LOG" not in env_of(spec["containers"][0])


def test_pdb_and_network_policy_defaults():
    docs, _ = render({})
    assert sorted(p["metadata"]["name"] for p in find(docs, "PodDisruptionBudget")) == [
        f"{FULL}-mailbox", f"{FULL}-relay", f"{FULL}-transit"]
    policy = one(docs, "NetworkPolicy", f"{FULL}-relay")
    public, admin = policy["spec"]["ingress"]
    assert "from" not in public  # the public ports are open to everyone
    assert public["ports"] == [{"port": 8443, "protocol": "TCP"}, {"port": 3478, "protocol": "UDP"},
                               {"port": 7842, "protocol": "UDP"}]  # STUN and QUIC address discovery
    assert admin["ports"] == [{"port": 9402, "protocol": "TCP"}]
    assert admin["from"] == [{"namespaceSelector": {}}]


def test_crd_objects(rendered):
    # kubernetes-validate has no schemas for CRDs; check the fields their CRDs require.
    _name, _values, docs, _notes = rendered
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert doc["spec"]["selector"]["matchLabels"]
            assert all(e["port"] and e["path"] == "/metrics" for e in doc["spec"]["endpoints"])
        if doc["kind"] == "Certificate":
            assert doc["apiVersion"] == "cert-manager.io/v1"
            assert doc["spec"]["secretName"] and doc["spec"]["dnsNames"]
            assert doc["spec"]["issuerRef"]["name"] and doc["spec"]["issuerRef"]["kind"] in ("Issuer",
                                                                                              "ClusterIssuer")


def test_notes_print_the_client_settings():
    _, notes = render({"publicHost": "burrow.example.org"})
    assert "--relay-url ws://burrow.example.org:4000/v1" in notes
    assert "--transit-helper tcp:burrow.example.org:4001" in notes
    assert "https://burrow.example.org/derp" in notes
    assert "iroh relay  https://burrow.example.org (a RelayMap URL" in notes
    assert "burrow.example.org:3478 (UDP)" in notes
    assert "burrow relay-probe https://burrow.example.org --stun-port 3478 --insecure" in notes

    _, notes = render({"relay": {"service": {"port": 8443}}})
    assert "kubectl get svc" in notes  # no publicHost: how to find the address
    assert "--relay-url ws://HOST:4000/v1" in notes
    assert "https://HOST:8443/derp" in notes


def test_relay_mesh():
    docs, _ = render({})
    assert find(docs, "StatefulSet") == [] and one(docs, "Deployment", f"{FULL}-relay")
    assert not find(docs, "Secret", f"{FULL}-relay-mesh-key")

    docs, _ = render({"relay": {"replicas": 3, "mesh": {"enabled": True}}, "expose": {"mode": "separate"}})
    assert not find(docs, "Deployment", f"{FULL}-relay")
    sts = one(docs, "StatefulSet", f"{FULL}-relay")
    assert (sts["spec"]["replicas"], sts["spec"]["serviceName"]) == (3, f"{FULL}-relay-mesh")
    container = pod_spec(sts)["containers"][0]
    env = env_of(container)
    assert env["BURROW_RELAY_MESH_WITH"] == f"dns+http://{FULL}-relay-mesh.burrow.svc:8080"
    assert env["BURROW_RELAY_HTTP_PORT"] == "8080"
    assert env["BURROW_RELAY_MESH_KEY_FILE"] == "/etc/burrow/mesh/mesh.key"
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["relay-http"] == 8080
    headless = one(docs, "Service", f"{FULL}-relay-mesh")
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert headless["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    secret = one(docs, "Secret", f"{FULL}-relay-mesh-key")
    key = base64.b64decode(secret["data"]["mesh.key"]).decode()
    assert len(key) == 64 and bytes.fromhex(key)       # what --mesh-key-file reads
    volumes = {v["name"]: v for v in pod_spec(sts)["volumes"]}
    assert volumes["mesh-key"]["secret"]["secretName"] == f"{FULL}-relay-mesh-key"
    # the mesh port is open to the relay pods only
    policy = one(docs, "NetworkPolicy", f"{FULL}-relay")
    mesh_rule = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 8080]
    assert mesh_rule[0]["from"] == [{"podSelector": {"matchLabels": sts["spec"]["selector"]["matchLabels"]}}]

    docs, _ = render({"relay": {"mesh": {"enabled": True, "keySecret": "my-mesh-key", "port": 9000}}})
    assert not find(docs, "Secret", f"{FULL}-relay-mesh-key")
    sts = one(docs, "StatefulSet", f"{FULL}-relay")
    volumes = {v["name"]: v for v in pod_spec(sts)["volumes"]}
    assert volumes["mesh-key"]["secret"]["secretName"] == "my-mesh-key"
    assert env_of(pod_spec(sts)["containers"][0])["BURROW_RELAY_MESH_WITH"].endswith(".burrow.svc:9000")
