"""The smoke test's own machinery: skip reasons, compose interpolation and port specs, the mirror lookup."""

from __future__ import annotations

import pytest

from tests.deploy import podman_stack
from tests.deploy.podman_stack import interpolate, parse_port


def test_missing_podman_is_named(monkeypatch):
    monkeypatch.setattr(podman_stack.shutil, "which", lambda tool: None if tool == "podman" else f"/usr/bin/{tool}")
    reason = podman_stack.missing_prerequisites()
    assert reason and "`podman` is not installed" in reason and "apt-get install podman" in reason


def test_compose_interpolation():
    env = {"SET": "x", "EMPTY": ""}
    assert interpolate("${SET:-d}/${EMPTY:-d}/${UNSET:-d}", env) == "x/d/d"
    assert interpolate("${EMPTY-d}/${UNSET-d}", env) == "/d"
    assert interpolate({"a": ["${SET}", 4]}, env) == {"a": ["x", 4]}
    with pytest.raises(ValueError, match="set it"):
        interpolate("${UNSET:?set it}", env)


def test_port_specs():
    assert parse_port("4000:4000/tcp") == ("4000/tcp", ("0.0.0.0", 4000))
    assert parse_port("127.0.0.1:9400:9400/tcp") == ("9400/tcp", ("127.0.0.1", 9400))
    assert parse_port("127.0.0.1:5555:3478/udp") == ("3478/udp", ("127.0.0.1", 5555))
    assert parse_port("8443:8443") == ("8443/tcp", ("0.0.0.0", 8443))


def test_debian_mirror_is_a_url():
    assert podman_stack.debian_mirror().startswith(("http://", "https://"))


def test_compose_durations():
    assert podman_stack.duration_ns("10s") == 10 * 10**9
    assert podman_stack.duration_ns("1m30s") == 90 * 10**9
    assert podman_stack.duration_ns("500ms") == 5 * 10**8
    assert podman_stack.duration_ns(3) == 3 * 10**9
    with pytest.raises(ValueError):
        podman_stack.duration_ns("10 seconds")
