"""Every service's /metrics, scraped from the real server on 127.0.0.1 and read with prometheus_client's parser.

Properties: each base name belongs to one family (no gauge `x` beside a counter `x_total`), no `_created`
series, every family has samples from the start (labelled counters pre-created at 0 for every label value
the service knows), the standard `process_*` series, `burrow_build_info{version}`, and the latency
histograms; then that the pairing-wait and handshake histograms observe once per pair and per client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import urllib.request
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from burrow.discovery import stats as discovery_stats
from burrow.mailbox_server import metrics as mailbox_metrics
from burrow.packet_relay import stats as relay_stats
from burrow.packet_relay.messaging_server import service as messaging_service
from harness.ports import free_port, wait_http
from harness.processes import burrow
from harness.redis import RedisServer
from tests.packet_relay import derp_util
from tests.packet_relay.iroh import util as iroh_util

# service -> (module, flags besides the admin ones); the relay runs with its messaging port on
SERVICES = {
    "mailbox": ("mailbox_server", ["--host", "127.0.0.1", "--port", "0", "--db", "{tmp}/mailbox.sqlite"]),
    "transit": ("transit_relay", ["--host", "127.0.0.1", "--port", "{tcp}", "--websocket-port", "0"]),
    "relay": ("packet_relay", ["--host", "127.0.0.1", "--https-port", "0", "--stun-port", "{udp}",
                               "--messaging-port", "{tcp}", "--messaging-key-file", "{tmp}/messaging.key",
                               "--dev-tls", "--tls-dir", "{tmp}/tls", "--key-file", "{tmp}/relay.key"]),
    "discovery": ("discovery", ["--host", "127.0.0.1", "--port", "0"]),
}
# the same services keeping their state in a real redis-server: common/redis.py's series join theirs
REDIS_VARIANTS = {"mailbox+redis": "mailbox", "discovery+redis": "discovery"}

PROCESS_SERIES = {"process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds",
                  "process_start_time_seconds", "python_info"}


def per_protocol(known) -> set[tuple[str, str]]:
    return {tuple(k) for k in relay_stats._per_protocol(known)}


# family -> (label names, every label tuple the service must show before any traffic)
KNOWN_LABELS = {
    "mailbox": {
        "burrow_mailbox_sessions": (["mood"], {(m,) for m in mailbox_metrics.MAILBOX_MOODS}),
        "burrow_mailbox_nameplate_sessions": (["mood"], {(m,) for m in mailbox_metrics.NAMEPLATE_MOODS}),
        "burrow_mailbox_errors": (["reason"], {(t,) for t in mailbox_metrics.ERROR_TEXTS}),
        "burrow_mailbox_refusals": (["limit"], {(t,) for t in mailbox_metrics.REFUSAL_LIMITS}),
    },
    "transit": {
        "burrow_transit_sessions": (["mood"], {(m,) for m in
                                               ("happy", "jilted", "lonely", "errory", "redundant", "impatient",
                                                "empty")}),
        "burrow_transit_refusals": (["limit"], {("total",), ("per_ip",), ("pending",), ("pairs",)}),
        "burrow_transit_timeouts": (["phase"], {("handshake",), ("pending",), ("idle",)}),
    },
    "relay": {
        "burrow_relay_connections_accepted": (["protocol", "transport"], per_protocol(relay_stats.TRANSPORTS)),
        "burrow_relay_packets_dropped": (["protocol", "reason"], per_protocol(relay_stats.DROP_REASONS)),
        "burrow_relay_closes": (["protocol", "reason"], per_protocol(relay_stats.CLOSE_REASONS)),
        "burrow_relay_protocol_errors": (["protocol", "kind"], per_protocol(relay_stats.ERROR_KINDS)),
        "burrow_relay_access_denied": (["protocol", "source"], per_protocol(relay_stats.DENIED_SOURCES)),
        "burrow_relay_http_requests": (["endpoint"], {(e,) for e in relay_stats.HTTP_ENDPOINTS}),
        "burrow_relay_packets_forwarded": (["protocol"], {("derp",), ("iroh",)}),
        "burrow_relay_iroh_logins": (["mechanism"], {("challenge",), ("key_material",)}),
        "burrow_relay_stun_requests": (["result"], {("answered",), ("malformed",), ("rate_limited",)}),
        "burrow_relay_messaging_closes": (["reason"], {(r,) for r in messaging_service.CLOSE_REASONS}),
        "burrow_relay_messaging_handshake_failures": (["reason"],
                                                      {(r,) for r in messaging_service.HANDSHAKE_REASONS}),
        "burrow_relay_messaging_channels_refused": (["reason"], {(r,) for r in messaging_service.REFUSED_REASONS}),
    },
    "discovery": {
        "burrow_discovery_requests": (["endpoint"], {(e,) for e in discovery_stats.ENDPOINTS}),
        "burrow_discovery_writes": (["kind"], {(k,) for k in discovery_stats.WRITE_KINDS}),
        "burrow_discovery_refused": (["reason"], {(r,) for r in discovery_stats.REFUSED_REASONS}),
    },
}

HISTOGRAMS = {"mailbox": {"burrow_mailbox_delivery_latency_seconds", "burrow_mailbox_commit_seconds"},
              "transit": {"burrow_transit_pairing_wait_seconds"},
              "relay": {"burrow_relay_handshake_seconds"},
              "discovery": set()}


@contextlib.contextmanager
def running(service: str, tmp: Path, redis_url: str | None = None) -> Iterator[tuple[str, int]]:
    """`python -m burrow.<module>` on loopback; yields (admin URL, the --port given as {tcp} if any)."""
    module, args = SERVICES[service]
    if redis_url is not None:
        args = [*args, "--redis-url", redis_url]
    tcp = free_port()
    argv = [a.format(tmp=tmp, tcp=tcp, udp=free_port(socket.SOCK_DGRAM)) for a in args]
    admin = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BURROW_")}
    url = f"http://127.0.0.1:{admin}"
    with burrow(module, *argv, "--admin-host", "127.0.0.1", "--admin-port", str(admin),
                log=tmp / f"{service}.log", env=env) as proc:
        try:
            wait_http(url + "/healthz", proc.proc)
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"{service}: {exc}: {proc.output()}") from None
        yield url, tcp


def scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as reply:
        return reply.read().decode()


def families(text: str) -> list:
    return list(text_string_to_metric_families(text))


def sample_value(text: str, name: str, **labels) -> float | None:
    for family in families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return None


@pytest.mark.parametrize("variant", sorted(SERVICES) + sorted(REDIS_VARIANTS))
def test_metrics_are_tidy(variant, tmp_path):
    service = REDIS_VARIANTS.get(variant, variant)
    with contextlib.ExitStack() as stack:
        redis_url = None
        if variant in REDIS_VARIANTS:
            redis = RedisServer(tmp_path / "redis", appendfsync="no")
            stack.callback(redis.stop)
            redis_url = redis.url
        url, _port = stack.enter_context(running(service, tmp_path, redis_url))
        text = scrape(url)
    fams = families(text)
    names = [f.name for f in fams]

    # one family per base name: a gauge `x` and a counter `x_total` would both parse as family `x`
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    sample_names = {s.name for f in fams for s in f.samples}
    for f in fams:
        own = {s.name for s in f.samples}
        assert not (sample_names - own) & {f.name, f.name + "_total"}, f"{f.name} shares its base name"

    assert not [n for n in names + sorted(sample_names) if n.endswith("_created")], "stray _created series"

    # every family shows samples before any traffic: labelled counters are pre-created at 0
    empty = [f.name for f in fams if not f.samples]
    assert not empty, f"families without samples: {empty}"
    for f in fams:
        if f.type == "counter":
            assert all(s.name == f.name + "_total" for s in f.samples), f.name
        if f.type == "gauge":
            assert not f.name.endswith("_total"), f.name

    by_name = {f.name: f for f in fams}
    for family, (labels, wanted) in KNOWN_LABELS[service].items():
        assert by_name[family].type == "counter", family
        shown = {tuple(s.labels[k] for k in labels) for s in by_name[family].samples}
        assert wanted <= shown, f"{family} lacks {sorted(wanted - shown)}"
        assert all(s.value == 0 for s in by_name[family].samples), family

    assert PROCESS_SERIES <= set(names), sorted(PROCESS_SERIES - set(names))
    build = by_name["burrow_build_info"]
    assert build.type == "gauge"
    assert [(s.labels, s.value) for s in build.samples] == [({"version": metadata.version("burrow")}, 1.0)]

    for name in HISTOGRAMS[service]:
        assert by_name[name].type == "histogram", name
    prefix = f"burrow_{service}_"
    ours = [n for n in names if n.startswith("burrow_") and n != "burrow_build_info"]
    assert ours and all(n.startswith(prefix) for n in ours), [n for n in ours if not n.startswith(prefix)]
    if variant in REDIS_VARIANTS:
        assert by_name[prefix + "redis_up"].samples[0].value == 1
        assert by_name[prefix + "redis_roundtrip_seconds"].type == "histogram"


async def _please_relay(port: int, token: str, side: str):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"please relay {token} for side {side}\n".encode())
    await writer.drain()
    return reader, writer


async def test_transit_pairing_wait_observed_once_per_pair(tmp_path):
    with running("transit", tmp_path) as (url, port):
        assert sample_value(scrape(url), "burrow_transit_pairing_wait_seconds_count") == 0
        token = "ab" * 32
        first = await _please_relay(port, token, "1" * 16)
        lonely = await _please_relay(port, "cd" * 32, "3" * 16)  # never pairs: never observed
        await asyncio.sleep(0.3)  # the first side waits a while
        second = await _please_relay(port, token, "2" * 16)
        for reader, _writer in (first, second):
            assert await asyncio.wait_for(reader.readline(), 10) == b"ok\n"
        first[1].write(b"x" * 100_000)  # relayed bytes add no observation
        await first[1].drain()
        await asyncio.wait_for(second[0].readexactly(100_000), 10)
        text = scrape(url)
        for _reader, writer in (first, second, lonely):
            writer.close()
    assert sample_value(text, "burrow_transit_pairing_wait_seconds_count") == 1
    assert sample_value(text, "burrow_transit_pairing_wait_seconds_bucket", le="+Inf") == 1
    assert sample_value(text, "burrow_transit_pairing_wait_seconds_sum") > 0


async def test_relay_handshake_observed_once_per_client(tmp_path):
    async with iroh_util.iroh_relay(tmp_path) as server:
        url = f"http://127.0.0.1:{server.admin_port}"
        text = await asyncio.to_thread(scrape, url)
        for protocol in ("derp", "iroh"):
            assert sample_value(text, "burrow_relay_handshake_seconds_count", protocol=protocol) == 0
        derp_a = await derp_util.client(server)
        derp_b = await derp_util.client(server)
        iroh = await iroh_util.client(server)
        try:
            await derp_a.send(derp_b.public_key, b"hello")  # packets add no observation
            assert await derp_b.recv(10) == (derp_a.public_key, b"hello")
            text = await asyncio.to_thread(scrape, url)
        finally:
            for c in (derp_a, derp_b, iroh):
                await c.close()
    assert sample_value(text, "burrow_relay_handshake_seconds_count", protocol="derp") == 2
    assert sample_value(text, "burrow_relay_handshake_seconds_count", protocol="iroh") == 1
    assert sample_value(text, "burrow_relay_handshake_seconds_sum", protocol="derp") > 0
