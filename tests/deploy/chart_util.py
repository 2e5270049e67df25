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
