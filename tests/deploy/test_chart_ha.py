"""The chart's high-availability mode (helm/burrow/values-ha.yaml): mailbox replicas on Redis, rolling
upgrades that drain, the bundled Redis, topology spread, PDBs, and the schema and template rules that
refuse an unsafe combination. Lint and strict validation of values-ha.yaml run in test_chart.py (its
"ha" value set); here the properties operators rely on are checked in the rendered objects."""

from __future__ import annotations

import helm_python as helm
import pytest

from tests.deploy.chart_util import CHART, KUBE_VERSIONS, env_of, find, one, pod_spec, render, validate
from tests.deploy.test_chart import FULL, VALUE_SETS

HA = VALUE_SETS["ha"]
SELECTOR = {"app.kubernetes.io/name": "burrow", "app.kubernetes.io/instance": "demo"}


def with_ha(**changes) -> dict:
    """values-ha.yaml with some top-level sections replaced."""
    return {**HA, **changes}


def test_mailbox_replicas_roll_one_at_a_time_and_drain():
    docs, _ = render(HA)
    mailbox = one(docs, "Deployment", f"{FULL}-mailbox")
    assert mailbox["spec"]["replicas"] == HA["mailbox"]["replicas"] > 1
    assert mailbox["spec"]["strategy"] == {"type": "RollingUpdate",
                                           "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    spec = pod_spec(mailbox)
    container = spec["containers"][0]
    env = env_of(container)
    assert env["BURROW_MAILBOX_REDIS_URL"] == f"redis://{FULL}-redis:6379/0"
    assert env["BURROW_MAILBOX_REPLICA_ID"] == "$(POD_NAME)"  # unique per pod
    assert "BURROW_MAILBOX_DB" not in env
    drain = HA["mailbox"]["drain"]
    assert float(env["BURROW_MAILBOX_DRAIN_TIMEOUT"]) == drain["timeoutSeconds"]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", str(drain["preStopSeconds"])]
    assert spec["terminationGracePeriodSeconds"] > drain["preStopSeconds"] + drain["timeoutSeconds"]
    # No SQLite volume or claim: the state is in Redis.
    assert "data" not in {v["name"] for v in spec["volumes"]}
    assert not find(docs, "PersistentVolumeClaim", f"{FULL}-mailbox")
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_bundled_redis_is_durable_private_and_hardened():
    docs, _ = render(HA)
    redis = one(docs, "StatefulSet", f"{FULL}-redis")
    assert redis["spec"]["replicas"] == 1
    spec = pod_spec(redis)
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    assert spec["automountServiceAccountToken"] is False
    container = spec["containers"][0]
    args = container["args"]
    for flag, value in (("--appendonly", "yes"), ("--appendfsync", "always"),
                        ("--maxmemory-policy", "noeviction"), ("--dir", "/data")):
        assert args[args.index(flag) + 1] == value, flag
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/data", "/tmp"}
    for probe in ("readinessProbe", "livenessProbe"):
        assert "redis-cli ping" in container[probe]["exec"]["command"][-1]
    claim = redis["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data" and claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert redis["spec"]["serviceName"] == f"{FULL}-redis-headless"
    assert one(docs, "Service", f"{FULL}-redis-headless")["spec"]["clusterIP"] == "None"
    service = one(docs, "Service", f"{FULL}-redis")["spec"]
    assert service["type"] == "ClusterIP" and service["ports"][0]["port"] == 6379
    assert service["selector"] == redis["spec"]["selector"]["matchLabels"]
    # Only the mailbox and transit pods reach Redis; with restricted egress the mailboxes may reach it.
    policy = one(docs, "NetworkPolicy", f"{FULL}-redis")["spec"]
    [rule] = policy["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {**SELECTOR, "app.kubernetes.io/component": c}}}
                            for c in ("mailbox", "transit")]
    docs, _ = render(with_ha(networkPolicy={"restrictEgress": True}))
    egress = one(docs, "NetworkPolicy", f"{FULL}-mailbox")["spec"]["egress"]
    assert {"to": [{"podSelector": {"matchLabels": {**SELECTOR, "app.kubernetes.io/component": "redis"}}}],
            "ports": [{"port": 6379, "protocol": "TCP"}]} in egress
    for doc in docs:
        validate(doc, KUBE_VERSIONS[-1])


def test_transit_pods_pair_through_redis_so_a_draining_pod_keeps_its_waiting_sides():
    docs, _ = render(HA)
    transit = one(docs, "StatefulSet", f"{FULL}-transit")
    spec = pod_spec(transit)
    env = env_of(spec["containers"][0])
    assert env["BURROW_TRANSIT_PROXY_PROTOCOL"] == "true"  # still routed by token through HAProxy
    assert env["BURROW_TRANSIT_REDIS_URL"] == f"redis://{FULL}-redis:6379/0"
    assert env["BURROW_TRANSIT_ADVERTISE_ADDRESS"] == "$(POD_IP):4003"
    assert float(env["BURROW_TRANSIT_DRAIN_TIMEOUT"]) < spec.get("terminationGracePeriodSeconds", 30)
    [volume] = [v for v in spec["volumes"] if v["name"] == "peer-secret"]
    secret = one(docs, "Secret", volume["secret"]["secretName"])  # generated, kept across upgrades
    assert set(secret["data"]) == {"peer-secret"}
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    policy = one(docs, "NetworkPolicy", f"{FULL}-transit")["spec"]
    assert {"ports": [{"port": 4003, "protocol": "TCP"}],
            "from": [{"podSelector": {"matchLabels": {**SELECTOR, "app.kubernetes.io/component": "transit"}}}]
            } in policy["ingress"]
    # an operator's own secret and Redis
    docs, _ = render(with_ha(transit={**HA["transit"], "redis": {"pairing": True, "peerSecretName": "hop",
                                                                 "url": "redis://other:6379/1"}}))
    spec = pod_spec(one(docs, "StatefulSet", f"{FULL}-transit"))
    assert env_of(spec["containers"][0])["BURROW_TRANSIT_REDIS_URL"] == "redis://other:6379/1"
    assert [v["secret"]["secretName"] for v in spec["volumes"] if v["name"] == "peer-secret"] == ["hop"]
    assert not find(docs, "Secret", f"{FULL}-transit-peer")
    with pytest.raises(helm.HelmError, match="pairing needs a Redis"):
        render(with_ha(redis={"bundled": {"enabled": False}}, mailbox={**HA["mailbox"], "replicas": 1}))


def test_every_service_is_spread_and_has_a_disruption_budget():
    docs, _ = render(HA)
    assert one(docs, "StatefulSet", f"{FULL}-transit")["spec"]["replicas"] == HA["transit"]["replicas"] > 1
    assert one(docs, "StatefulSet", f"{FULL}-relay")["spec"]["replicas"] == HA["relay"]["replicas"] > 1
    assert one(docs, "Service", f"{FULL}-relay-mesh")["spec"]["clusterIP"] == "None"
    for component in ("mailbox", "transit", "relay"):
        [workload] = [w for w in find(docs, "Deployment") + find(docs, "StatefulSet")
                      if w["metadata"]["name"] == f"{FULL}-{component}"]
        spec = pod_spec(workload)
        constraints = spec["topologySpreadConstraints"]
        assert [c["topologyKey"] for c in constraints] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
        for c in constraints:
            assert c["labelSelector"]["matchLabels"] == {**SELECTOR, "app.kubernetes.io/component": component}
            assert c["maxSkew"] == 1 and c["whenUnsatisfiable"] == "ScheduleAnyway"
        pdb = one(docs, "PodDisruptionBudget", f"{FULL}-{component}")["spec"]
        assert pdb["maxUnavailable"] == 1
        assert pdb["selector"]["matchLabels"]["app.kubernetes.io/component"] == component
    docs, _ = render({})  # off by default
    assert "topologySpreadConstraints" not in pod_spec(one(docs, "Deployment", f"{FULL}-mailbox"))


def test_external_redis_by_url_or_secret():
    docs, notes = render(with_ha(redis={"url": "rediss://:hunter2@redis.example.internal:6380/0"}))
    assert not find(docs, "StatefulSet", f"{FULL}-redis")
    env = env_of(pod_spec(one(docs, "Deployment", f"{FULL}-mailbox"))["containers"][0])
    assert env["BURROW_MAILBOX_REDIS_URL"] == "rediss://:hunter2@redis.example.internal:6380/0"
    assert "hunter2" not in notes and "redis.example.internal:6380" in notes

    docs, _ = render(with_ha(redis={"urlSecret": {"name": "mailbox-redis"}}))
    container = pod_spec(one(docs, "Deployment", f"{FULL}-mailbox"))["containers"][0]
    [entry] = [e for e in container["env"] if e["name"] == "BURROW_MAILBOX_REDIS_URL"]
    assert entry["valueFrom"] == {"secretKeyRef": {"name": "mailbox-redis", "key": "url"}}


def test_unsafe_combinations_are_refused():
    with helm.Chart.load(CHART) as chart:
        # Several replicas on SQLite: two writers of one database.
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(chart.merge_values({"mailbox": {"replicas": 2}}))
        for redis in ({"url": "redis://r:6379/0"}, {"urlSecret": {"name": "s"}}, {"bundled": {"enabled": True}}):
            chart.validate_schema(chart.merge_values({"mailbox": {"replicas": 2}, "redis": redis}))
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(chart.merge_values({"redis": {"url": "http://not-redis"}}))
    with pytest.raises(helm.HelmError, match="only one of"):
        render(with_ha(redis={"url": "redis://r:6379/0", "bundled": {"enabled": True}}))
    with pytest.raises(helm.HelmError, match="terminationGracePeriodSeconds"):
        render(with_ha(mailbox={**HA["mailbox"], "terminationGracePeriodSeconds": 15}))


def test_notes_say_how_to_reach_and_roll_everything():
    _, notes = render(with_ha(publicHost="burrow.example.org"))
    assert "--relay-url ws://burrow.example.org:4000/v1" in notes
    assert f"3 replicas sharing Redis at redis://{FULL}-redis:6379/0" in notes
    assert f"kubectl rollout restart -n burrow deployment/{FULL}-mailbox" in notes
    assert f"statefulset/{FULL}-redis" in notes
    _, notes = render({})
    assert "High availability" not in notes
