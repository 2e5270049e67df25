"""Stand-ins for the Redis and HAProxy images docker/compose.ha.yaml runs, for machines where no
registry serves redis:7.2 and haproxy:2.8: Debian's packages on the smoke test's local base image."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from tests.deploy.podman_stack import note

STANDIN_IMAGE = "localhost/burrow-ci-redis-haproxy:bookworm"
# Debian's redis-server and haproxy on the local base, laid out like the official images where
# compose.ha.yaml relies on it: /data for Redis (owned by uid 999, the official redis user), the
# configuration directory /usr/local/etc/haproxy, bash for the HAProxy healthcheck, redis-cli for
# Redis's. The official images run the command as given, as this one does (no entry point).
STANDIN_DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN apt-get -o APT::Sandbox::User=root update \\
    && DEBIAN_FRONTEND=noninteractive apt-get -o APT::Sandbox::User=root install -y \\
       --no-install-recommends redis-server redis-tools haproxy \\
    && rm -rf /var/lib/apt/lists/* \\
    && mkdir -p /data /usr/local/etc/haproxy \\
    && chown 999:999 /data
WORKDIR /data
"""


def standin_image(client: Any, base: str, log: Path) -> str:
    """The Redis + HAProxy stand-in (built once, from the Debian mirror apt uses), for machines where
    no registry serves redis:7.2 and haproxy:2.8. BURROW_CI_REDIS_IMAGE / BURROW_CI_HAPROXY_IMAGE
    name real images instead."""
    import docker

    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.get(STANDIN_IMAGE)
        return STANDIN_IMAGE
    note(log, f"==== build {STANDIN_IMAGE} (base {base})")
    with open(log, "a") as out:
        for chunk in client.api.build(fileobj=io.BytesIO(STANDIN_DOCKERFILE.encode()), tag=STANDIN_IMAGE,
                                      buildargs={"BASE_IMAGE": base}, network_mode="host", isolation="chroot",
                                      rm=True, forcerm=True, decode=True):
            out.write(chunk.get("stream", "") or (json.dumps(chunk) + "\n"))
            if "error" in chunk or "errorDetail" in chunk:
                raise RuntimeError(f"build of {STANDIN_IMAGE} failed: {chunk}")
    client.images.get(STANDIN_IMAGE)
    return STANDIN_IMAGE
