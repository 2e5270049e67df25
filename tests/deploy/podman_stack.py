"""Build the images and run docker/compose.yaml through the Docker Engine API, served here by podman.

No Docker engine runs on the CI machine, so `podman system service` serves the same API on a private
socket, with runc as the runtime and explicit ulimits (containers.conf): the sandbox may not raise
RLIMIT_NOFILE/NPROC to podman's defaults. Builds use chroot isolation and the host network.

Where no image registry is reachable, the python:3.11-slim base becomes a local Debian bookworm image
(debootstrap + python3 3.11 from the Debian mirror apt uses), cached under /var/cache/burrow-ci.
The containers cannot verify this machine's HTTPS proxy, so pip inside the build reads a wheelhouse the
host's pip prepared, served over HTTP on 127.0.0.1 (the Dockerfiles' PIP_NO_INDEX/PIP_FIND_LINKS args).

A compose file is read and applied by a small interpreter (`Stack`): the file under test is the one
operators run, not a copy in the test. It applies image, command, user, environment, ports, named and
bind volumes, networks (the service name as DNS alias; podman resolves it with the CNI dnsname
plugin), read_only, tmpfs, cap_drop, security_opt, ulimits and healthcheck; `build` is done by `build()`,
`depends_on` by the order a test starts services in, `stop_grace_period` by the timeout a test stops
containers with (`Stack.stop_timeout`), and `restart` does not matter within a test.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.chart_util import REPO

DOCKER_DIR = REPO / "docker"
CACHE_DIRS = [Path("/var/cache/burrow-ci"), Path(tempfile.gettempdir()) / "burrow-ci"]
LOCAL_BASE = "localhost/burrow-ci-base:bookworm"
UPSTREAM_BASE = "docker.io/library/python:3.11-slim"
BASE_PACKAGES = "python3,python3-venv,ca-certificates"


def missing_prerequisites() -> str | None:
    """Why the smoke test cannot run here, or None."""
    if sys.platform != "linux":
        return "the podman smoke test needs Linux"
    for tool in ("podman", "runc"):
        if not shutil.which(tool):
            return (f"`{tool}` is not installed (apt-get install podman runc containernetworking-plugins "
                    "iptables uidmap slirp4netns fuse-overlayfs debootstrap)")
    if os.geteuid() != 0:
        return "the podman smoke test runs podman as root (rootful storage, runc, debootstrap)"
    try:
        import docker  # noqa: F401
    except ImportError:
        return "the `docker` Python package is missing (pip install '.[deploy]')"
    return None


def cache_dir() -> Path:
    for d in CACHE_DIRS:
        with contextlib.suppress(OSError):
            d.mkdir(parents=True, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
    raise RuntimeError("no writable cache directory")


def nofile_hard() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def sandbox_ulimits() -> dict[str, tuple[int, int]]:
    """Limits every container gets: podman's defaults (nofile 1048576, nproc 4194304) exceed what an
    unprivileged sandbox may set, and runc then fails with "error setting rlimit"."""
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = 4096 if nproc == resource.RLIM_INFINITY else min(4096, nproc)
    nofile = min(8192, nofile_hard())
    return {"nofile": (nofile, nofile), "nproc": (nproc, nproc)}


@contextlib.contextmanager
def podman_service(workdir: Path, log: Path) -> Iterator[Any]:
    """`podman system service` on a private socket; yields a docker.DockerClient connected to it."""
    import docker

    limits = ", ".join(f'"{k}={soft}:{hard}"' for k, (soft, hard) in sandbox_ulimits().items())
    conf = workdir / "containers.conf"
    conf.write_text(f'[containers]\ndefault_ulimits = [{limits}]\n[engine]\nruntime = "runc"\n')
    sock = workdir / "podman.sock"
    env = dict(os.environ, CONTAINERS_CONF=str(conf))
    with open(log, "ab") as out:
        proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"],
                                env=env, stdout=out, stderr=out)
    try:
        client = None
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(Exception):
                if sock.exists():
                    client = docker.DockerClient(base_url=f"unix://{sock}", timeout=900)
                    if client.ping():
                        break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"podman system service did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        prune_stale_images(client, log)
        yield client
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def prune_stale_images(client: Any, log: Path) -> None:
    """Remove untagged images left by earlier runs' builds (each run re-tags its images and leaves the old
    ones and its build stages behind: gigabytes per run). Only those older than an hour, so a concurrent
    run's fresh build is never taken from under it."""
    import docker

    try:
        result = client.images.prune(filters={"dangling": True, "until": "1h"})
    except docker.errors.APIError as exc:
        note(log, f"could not prune stale images: {exc}")
        return
    removed = result.get("ImagesDeleted") or []
    note(log, f"pruned {len(removed)} stale images ({(result.get('SpaceReclaimed') or 0) >> 20} MiB)")


def debian_mirror() -> str:
    """The Debian archive apt on this machine uses (deb822 or one-line sources)."""
    for path in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        text = path.read_text()
        for block in text.split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", block, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", block, re.M)
            if uris and suites and "bookworm" in suites.group(1).split():
                return uris.group(1)
    for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt").glob("sources.list.d/*.list")]:
        if path.exists():
            m = re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", path.read_text(), re.M)
            if m:
                return m.group(1)
    return "http://deb.debian.org/debian"


def build_local_base_tar(log: Path) -> Path:
    """Debian bookworm minbase with python3 3.11, as a tar (cached across runs)."""
    cached = cache_dir() / "bookworm-python3.tar"
    if cached.exists():
        return cached
    note(log, f"debootstrap bookworm from {debian_mirror()}")
    if not shutil.which("debootstrap"):
        raise RuntimeError("no registry and no debootstrap: apt-get install debootstrap")
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        with open(log, "ab") as out:
            subprocess.run(["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm",
                            str(rootfs), debian_mirror()], check=True, stdout=out, stderr=out, timeout=900)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for f in (rootfs / junk).glob("*"):
                if f.is_file():
                    f.unlink()
        partial = cached.with_suffix(".partial")
        with tarfile.open(partial, "w") as tar:
            tar.add(rootfs, arcname=".")
        partial.rename(cached)
    return cached


def base_image(client: Any, log: Path) -> str:
    """python:3.11-slim when a registry answers, else the local Debian base (imported once)."""
    import docker

    override = os.environ.get("BURROW_CI_BASE_IMAGE")
    if override:
        return override
    for name in (UPSTREAM_BASE, LOCAL_BASE):
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.get(name)
            return name
    saved, client.api.timeout = client.api.timeout, 120  # a registry that hangs must not stall CI
    try:
        client.images.pull(UPSTREAM_BASE)
        return UPSTREAM_BASE
    except (docker.errors.APIError, OSError) as exc:
        note(log, f"cannot pull {UPSTREAM_BASE} ({exc}); using a local Debian base")
    finally:
        client.api.timeout = saved
    tar = build_local_base_tar(log)
    note(log, f"importing {tar} as {LOCAL_BASE}")
    result = client.api.import_image(src=str(tar), changes=['CMD ["/bin/bash"]'])
    image_id = json.loads(result.strip().splitlines()[-1])["id"] if isinstance(result, str) else result["id"]
    repository, tag = LOCAL_BASE.rsplit(":", 1)
    client.images.get(image_id).tag(repository, tag)
    return LOCAL_BASE


@contextlib.contextmanager
def wheelhouse(workdir: Path, extras: str, log: Path) -> Iterator[str]:
    """Wheels of every dependency (host pip, its indexes and proxy), served on 127.0.0.1; yields the URL.

    The project's own wheel is left out: the image builds it from the sources.
    """
    house = workdir / "wheels"
    house.mkdir(exist_ok=True)
    with open(log, "ab") as out:
        # async-timeout: redis-py needs it on Pythons before 3.11.3 (the image's Debian 3.11), not on the host's
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(house),
                        f"{REPO}{extras}", "setuptools>=68", "wheel", "async-timeout>=4.0.3"], check=True,
                       stdout=out, stderr=out, timeout=900)
    for own in house.glob("burrow-*.whl"):
        own.unlink()
    note(log, f"wheelhouse ready: {len(list(house.glob('*.whl')))} wheels")
    handler = functools.partial(_QuietHandler, directory=str(house))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass


def context_archive(dockerfile: str) -> Any:
    """The build context (repository root) filtered by the Dockerfile's allow-list, as a tar file object."""
    import docker

    ignore = DOCKER_DIR / f"{Path(dockerfile).name}.dockerignore"
    patterns = [p for p in ignore.read_text().splitlines() if p and not p.startswith("#")]
    return docker.utils.tar(str(REPO), exclude=patterns, dockerfile=(dockerfile, None))


def note(log: Path, text: str) -> None:
    with open(log, "a") as out:
        out.write(f"[{time.strftime('%H:%M:%S')}] {text}\n")


def build(client: Any, dockerfile: str, tag: str, base: str, pip_url: str, log: Path) -> str:
    """Build and tag the image; its ID (what the tag named when this build ended: another run on the
    same machine may move the tag before containers are created from it)."""
    context = context_archive(dockerfile)
    built = None
    args = {"BASE_IMAGE": base, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": pip_url}
    note(log, f"==== build {dockerfile} -> {tag} (base {base})")
    with open(log, "a") as out:
        try:
            for chunk in client.api.build(fileobj=context, custom_context=True, dockerfile=dockerfile, tag=tag,
                                          buildargs=args, network_mode="host", isolation="chroot", rm=True,
                                          forcerm=True, decode=True):
                out.write(chunk.get("stream", "") or (json.dumps(chunk) + "\n"))
                built = (chunk.get("aux") or {}).get("ID", built)
                if chunk.get("stream", "").startswith("Successfully built "):
                    built = chunk["stream"].split()[-1]
                if "error" in chunk or "errorDetail" in chunk:
                    raise RuntimeError(f"build of {dockerfile} failed: {chunk}")
        finally:
            context.close()
    image = client.images.get(built or tag).id
    note(log, f"==== built {tag} ({image})")
    return image


# ---- compose.yaml, applied through the API ------------------------------------------------------

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        val = env.get(name)
        if op in (":-", "-"):
            return val if val not in (None, "") or (op == "-" and val is not None) else arg
        if op in (":?", "?") and not val:
            raise ValueError(f"compose variable {name}: {arg}")
        return val or ""

    return _VAR.sub(one, value)


def duration_ns(spec: str | int) -> int:
    """Compose durations ('10s', '1m30s', '500ms') in nanoseconds, as the Engine API wants them."""
    if isinstance(spec, int):
        return spec * 10**9
    units = {"h": 3600 * 10**9, "m": 60 * 10**9, "s": 10**9, "ms": 10**6, "us": 10**3}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", spec)
    if not parts or "".join(n + u for n, u in parts) != spec:
        raise ValueError(f"not a compose duration: {spec!r}")
    return int(sum(float(n) * units[u] for n, u in parts))


def parse_port(spec: str) -> tuple[str, tuple[str, int]]:
    """'127.0.0.1:9400:9400/tcp' -> ('9400/tcp', ('127.0.0.1', 9400))."""
    spec, _, proto = spec.partition("/")
    parts = spec.split(":")
    host_ip = parts[0] if len(parts) == 3 else "0.0.0.0"
    return f"{parts[-1]}/{proto or 'tcp'}", (host_ip, int(parts[-2]))


class Stack:
    """The services of compose.yaml as containers, with the project's named volumes."""

    def __init__(self, client: Any, project: str, env: dict[str, str], images: dict[str, str],
                 compose_file: str = "compose.yaml") -> None:
        self.client = client
        self.project = project
        self.env = env
        self.images = images
        raw = yaml.safe_load((DOCKER_DIR / compose_file).read_text())
        self.compose = interpolate({k: v for k, v in raw.items() if not k.startswith("x-")}, env)
        self.containers: dict[str, Any] = {}
        self.volumes: list[Any] = []
        self.networks: list[Any] = []

    def network(self, name: str) -> str:
        full = f"{self.project}_{name}"
        if not any(n.name == full for n in self.networks):
            self.networks.append(self.client.networks.create(full, driver="bridge"))
        return full

    def volume(self, name: str) -> str:
        full = f"{self.project}_{name}"
        if not any(v.name == full for v in self.volumes):
            self.volumes.append(self.client.volumes.create(full))
        return full

    def service(self, name: str) -> dict[str, Any]:
        return self.compose["services"][name]

    def create(self, name: str, command: list[str] | None = None) -> Any:
        svc = self.service(name)
        volumes = {}
        for spec in svc.get("volumes", []):
            source, target, *mode = spec.split(":")
            if source.startswith((".", "/")):  # a bind mount, relative to the compose file
                source = str((DOCKER_DIR / source).resolve())
            else:
                source = self.volume(source)
            volumes[source] = {"bind": target, "mode": mode[0] if mode else "rw"}
        for secret in svc.get("secrets", []):  # compose's file secrets: read-only in /run/secrets
            source = Path(self.compose["secrets"][secret]["file"])
            volumes[str(source if source.is_absolute() else (DOCKER_DIR / source).resolve())] = {
                "bind": f"/run/secrets/{secret}", "mode": "ro"}
        ports = dict(parse_port(p) for p in svc.get("ports", []))
        # Explicit ulimits replace podman's defaults wholesale, so start from the sandbox's set; the
        # compose values apply up to this machine's hard limit (real Docker hosts allow more).
        ulimits = dict(sandbox_ulimits())
        for kind, limit in svc.get("ulimits", {}).items():
            soft, hard = (limit["soft"], limit["hard"]) if isinstance(limit, dict) else (limit, limit)
            cap = nofile_hard() if kind == "nofile" else ulimits.get(kind, (hard, hard))[1]
            ulimits[kind] = (min(soft, cap), min(hard, cap))
        import docker

        extra: dict[str, Any] = {}
        if svc.get("networks"):
            # compose attaches every service to its networks under its service name
            first = self.network(svc["networks"][0])
            extra["network"] = first
            extra["networking_config"] = {first: self.client.api.create_endpoint_config(aliases=[name])}
        if "healthcheck" in svc:
            hc = svc["healthcheck"]
            extra["healthcheck"] = {"test": hc["test"], "retries": hc.get("retries", 3),
                                    **{k: duration_ns(hc[k]) for k in ("interval", "timeout", "start_period") if k in hc}}
        if "user" in svc:
            extra["user"] = svc["user"]
        container = self.client.containers.create(
            self.images[name], command=command or svc.get("command"), name=f"{self.project}_{name}",
            environment=svc.get("environment", {}), ports=ports, volumes=volumes,
            read_only=svc.get("read_only", False), tmpfs={p: "" for p in svc.get("tmpfs", [])},
            cap_drop=svc.get("cap_drop"), security_opt=svc.get("security_opt"),
            ulimits=[docker.types.Ulimit(name=k, soft=soft, hard=hard) for k, (soft, hard) in ulimits.items()],
            labels={"com.docker.compose.project": self.project, "com.docker.compose.service": name}, **extra)
        for net in svc.get("networks", [])[1:]:
            self.client.networks.get(self.network(net)).connect(container, aliases=[name])
        self.containers[name] = container
        return container

    def stop_timeout(self, name: str) -> int:
        """Seconds between SIGTERM and SIGKILL: the service's stop_grace_period (compose's default 10 s)."""
        return duration_ns(self.service(name).get("stop_grace_period", "10s")) // 10**9

    def up(self, names: list[str]) -> None:
        for name in names:
            self.create(name).start()

    def down(self) -> None:
        import docker

        for container in self.containers.values():
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True, v=True)
        for volume in self.volumes:
            with contextlib.suppress(docker.errors.APIError):
                volume.remove(force=True)
        for network in self.networks:
            with contextlib.suppress(docker.errors.APIError):
                network.remove()

    def logs(self) -> str:
        out = []
        for name, container in self.containers.items():
            with contextlib.suppress(Exception):
                out.append(f"---- {name}\n{container.logs(tail=60).decode(errors='replace')}")
        return "\n".join(out)

