"""Every BURROW_<SERVICE>_<FIELD> variable the image, compose files, chart and docs set is a real setting.

The servers ignore environment variables they do not know, so a misspelt name in a deployment file
would silently fall back to a default (e.g. an admin port bound to 127.0.0.1 inside a container,
failing every probe). This test ties the deployment files to the servers' config dataclasses.
"""

from __future__ import annotations

import dataclasses
import importlib
import re

import pytest

from tests.deploy.chart_util import REPO, render
from tests.deploy.test_chart import VALUE_SETS

PACKAGES = {"MAILBOX": "burrow.mailbox_server", "TRANSIT": "burrow.transit_relay", "RELAY": "burrow.packet_relay"}
NAME = re.compile(r"\bBURROW_(MAILBOX|TRANSIT|RELAY)_([A-Z0-9_]+)\b")
FILES = ["docker/Dockerfile", "docker/compose.yaml", "docker/compose.tls.yaml", "docker/compose.mesh.yaml",
         "docker/compose.ha.yaml", "docs/deploy.md", "helm/burrow/values.yaml"]


def config_class(service: str) -> type:
    module = importlib.import_module(f"{PACKAGES[service]}.config")
    classes = [v for v in vars(module).values()
               if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == module.__name__]
    assert len(classes) == 1, f"expected one config dataclass in {module.__name__}, got {classes}"
    return classes[0]


def fields(service: str) -> set[str]:
    return {f.name.upper() for f in dataclasses.fields(config_class(service))}


def names_in(text: str) -> set[tuple[str, str]]:
    return set(NAME.findall(text))


def check(where: str, text: str) -> None:
    unknown = sorted(f"BURROW_{svc}_{field}" for svc, field in names_in(text) if field not in fields(svc))
    assert not unknown, f"{where} sets variables no server reads: {unknown}"


@pytest.mark.parametrize("path", FILES)
def test_files_use_real_settings(path):
    text = (REPO / path).read_text()
    assert names_in(text), f"{path} mentions no BURROW_* setting"
    check(path, text)


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_chart_uses_real_settings(name):
    docs, notes = render(VALUE_SETS[name])
    env = [e["name"] for d in docs if d["kind"] == "Deployment"
           for c in d["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])]
    assert env
    check(f"chart ({name})", "\n".join(env) + notes)


def test_detects_a_misspelt_name():
    with pytest.raises(AssertionError, match="BURROW_MAILBOX_ADMIN_HOSTNAME"):
        check("example", "BURROW_MAILBOX_ADMIN_HOSTNAME=0.0.0.0")


def test_healthcheck_defaults_match_the_servers():
    # The image's HEALTHCHECK falls back to these when no --admin-port / env overrides them.
    import importlib.util

    spec = importlib.util.spec_from_file_location("burrow_healthcheck", REPO / "docker" / "healthcheck.py")
    hc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hc)
    for service in PACKAGES:
        default = {f.name: f.default for f in dataclasses.fields(config_class(service))}["admin_port"]
        assert hc.DEFAULT_ADMIN_PORTS[service.lower()] == default, service
