"""Render the Helm chart with the Helm engine bundled in helm-python-sdk and validate what comes out.

helm-python-sdk binds libhelm_c (Helm 4's Go SDK) with ctypes: `helm_python.lint(path, values, ...)` is
`helm lint`, `Chart.load(path).render(values, name=..., namespace=...)` is `helm template`.
kubernetes-validate checks each manifest against the Kubernetes OpenAPI schema of a given version;
`strict=True` also rejects fields the schema does not know (typos such as `readinessprobe`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate.utils as kv
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "burrow"
RELEASE = "demo"
NAMESPACE = "burrow"

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest the validator knows.
KUBE_VERSIONS = ["1.25.0", kv.latest_version()]

# Kinds from CRDs, which kubernetes-validate has no schema for: checked field by field in the tests.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("cert-manager.io/v1", "Certificate")}


def render(values: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], str]:
    """Render the chart; returns (every manifest as a dict, NOTES.txt)."""
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    notes = ""
    docs: list[dict[str, Any]] = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs, notes


def lint(values: dict[str, Any] | None = None, kube_version: str | None = None) -> dict[str, Any]:
    return helm.lint(CHART, values or {}, strict=True, namespace=NAMESPACE,
                     kube_version=f"v{kube_version}" if kube_version else None)


def validate(doc: dict[str, Any], kube_version: str) -> None:
    """Raise if the manifest does not validate (strictly) against the Kubernetes schema."""
    kv.validate(doc, kube_version, strict=True)


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, got {[d['metadata']['name'] for d in find(docs, kind)]}"
    return found[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return workload["spec"]["template"]["spec"]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "<from>") for e in container.get("env", [])}


# ---- How Services and Ingresses reach pods, computed as Kubernetes does it --------------------------

INTERNAL_PORT_NAMES = {"admin", "peer"}  # metrics/probes and transit's pod-to-pod hops: never public


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return find(docs, "Deployment") + find(docs, "StatefulSet")


def pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"]["labels"]


def is_headless(service: dict[str, Any]) -> bool:
    return service["spec"].get("clusterIP") == "None"


def endpoints(docs: list[dict[str, Any]], service: dict[str, Any], port: dict[str, Any]) -> list[tuple[str, str]]:
    """(workload, container port name) pairs a Service port sends to: the pods its selector matches that
    define the targetPort (a name, or a number) with the same protocol, which is the rule the endpoints
    controller applies (a pod without the named port is left out of that port's endpoints)."""
    selector = service["spec"].get("selector") or {}
    target = port.get("targetPort", port["port"])
    protocol = port.get("protocol", "TCP")
    found = []
    for w in workloads(docs):
        labels = pod_labels(w)
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            continue
        for c in pod_spec(w)["containers"]:
            for cp in c.get("ports", []):
                same = cp.get("name") == target if isinstance(target, str) else cp["containerPort"] == target
                if same and cp.get("protocol", "TCP") == protocol:
                    found.append((w["metadata"]["name"], cp.get("name", str(cp["containerPort"]))))
    return found


def service_port(service: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """The Service port an Ingress backend names ({"name": ...} or {"number": ...})."""
    [port] = [p for p in service["spec"]["ports"]
              if ("name" in ref and p.get("name") == ref["name"]) or ("number" in ref and p["port"] == ref["number"])]
    return port


def ingress_routes(docs: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(host, path, Service, Service port) of every Ingress path; fails if a backend does not exist."""
    routes = []
    for ing in find(docs, "Ingress"):
        for rule in ing["spec"]["rules"]:
            for p in rule["http"]["paths"]:
                backend = p["backend"]["service"]
                service = one(docs, "Service", backend["name"])
                routes.append((rule.get("host", ""), p["path"], service, service_port(service, backend["port"])))
    return routes


def public_entry_points(docs: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[dict, dict]]:
    """Every way in from outside: the ports of LoadBalancer/NodePort Services and the Service ports that
    Ingress paths lead to, keyed by (Service, port name)."""
    entries = {}
    for s in find(docs, "Service"):
        if s["spec"].get("type", "ClusterIP") in ("LoadBalancer", "NodePort"):
            for p in s["spec"]["ports"]:
                entries[(s["metadata"]["name"], p["name"])] = (s, p)
    for _host, _path, s, p in ingress_routes(docs):
        entries[(s["metadata"]["name"], p["name"])] = (s, p)
    return entries


def check_wiring(docs: list[dict[str, Any]], front_ends: set[str]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """The generic wiring check; returns {(Service, port): [(workload, container port)]} of the public ports.

    - every port of every Service reaches at least one container port (its targetPort resolves);
    - the workloads public entry points reach are exactly `front_ends` (those that take clients);
    - on each of them, each container port that is not internal (admin, peer, or targeted by headless
      Services only, such as the relay mesh port) is reached by exactly one public entry point: no public
      port is missing, none is offered twice;
    - a LoadBalancer/NodePort Service with externalTrafficPolicy Local that reaches several workloads
      keeps their pods on one node: the load balancer checks a node's health per Service (kube-proxy's
      healthCheckNodePort counts ready local endpoints of any port), so a node running only some of them
      would be sent, and drop, the others' connections.
    """
    for s in find(docs, "Service"):
        for p in s["spec"]["ports"]:
            assert endpoints(docs, s, p), f"Service {s['metadata']['name']} port {p['name']} reaches no pod"
    public = {key: endpoints(docs, s, p) for key, (s, p) in public_entry_points(docs).items()}
    reached: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for key, targets in public.items():
        for target in targets:
            reached.setdefault(target, []).append(key)
    targets_of = {headless: {t for s in find(docs, "Service") if is_headless(s) == headless
                             for p in s["spec"]["ports"] for t in endpoints(docs, s, p)} for headless in (True, False)}
    assert {w for w, _ in reached} == front_ends, "workloads reached from outside"
    for name in front_ends:
        [w] = [x for x in workloads(docs) if x["metadata"]["name"] == name]
        for c in pod_spec(w)["containers"]:
            for cp in c.get("ports", []):
                target = (name, cp["name"])
                pod_to_pod = target in targets_of[True] and target not in targets_of[False]
                if cp["name"] in INTERNAL_PORT_NAMES or pod_to_pod:
                    assert target not in reached, f"{target} is internal but public through {reached[target]}"
                    continue
                assert len(reached.get(target, [])) == 1, f"{target} is public through {reached.get(target)}"
    for s in find(docs, "Service"):
        if s["spec"].get("type") in ("LoadBalancer", "NodePort") and s["spec"]["externalTrafficPolicy"] == "Local":
            behind = {w for p in s["spec"]["ports"] for w, _ in endpoints(docs, s, p)}
            if len(behind) > 1:
                assert_one_node(docs, behind)
    return public


def assert_one_node(docs: list[dict[str, Any]], names: set[str]) -> None:
    """The pods of these workloads can only run on one node together: one pod each, and each requires
    (hostname pod affinity) a node running the group's pods, which a term matching all of them and
    nothing else gives (the first pod, matching its own term, may go anywhere)."""
    group = [w for w in workloads(docs) if w["metadata"]["name"] in names]
    for w in group:
        assert w["spec"]["replicas"] == 1, f"{w['metadata']['name']}: several pods cannot share one node"
        terms = pod_spec(w).get("affinity", {}).get("podAffinity", {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution", [])
        def selects(term: dict, labels: dict) -> bool:
            wanted = term["labelSelector"]["matchLabels"]
            return all(labels.get(k) == v for k, v in wanted.items())
        assert any(t["topologyKey"] == "kubernetes.io/hostname"
                   and all(selects(t, pod_labels(x)) for x in group)
                   and not any(selects(t, pod_labels(x)) for x in workloads(docs) if x not in group)
                   for t in terms), f"{w['metadata']['name']} is not held on the node of {sorted(names)}"
