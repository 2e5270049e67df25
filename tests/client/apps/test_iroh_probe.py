"""The iroh half of `burrow relay-probe` against a real relay (HTTP and HTTPS) and a broken one."""

import pytest

from burrow.client.apps.iroh_probe import probe_iroh
from tests.packet_relay.derp_util import ca
from tests.packet_relay.iroh.util import http_url, https_url, iroh_relay


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_probe_passes_against_our_relay(tmp_path, tls):
    lines = []
    async with iroh_relay(tmp_path) as server:
        url = https_url(server) if tls else http_url(server)
        failures = await probe_iroh(url, lambda ok, step, detail: lines.append((ok, step)),
                                    ca_file=ca(server) if tls else None, count=3, timeout=5)
    assert failures == 0
    assert lines == [(True, "iroh-http"), (True, "iroh-login"), (True, "iroh-data"), (True, "iroh-ping")]


async def test_probe_fails_where_iroh_is_not_served(tmp_path):
    lines = []
    async with iroh_relay(tmp_path) as server:
        server.extra_routes.clear()  # a DERP-only relay
        failures = await probe_iroh(http_url(server), lambda ok, step, detail: lines.append((ok, step)),
                                    count=1, timeout=3)
    assert failures == 2
    assert lines == [(False, "iroh-http"), (False, "iroh-login")]


async def test_relay_probe_command_checks_the_iroh_path(tmp_path):
    import io

    from burrow.client.apps import relay_probe as probe

    async with iroh_relay(tmp_path) as server:
        out = io.StringIO()
        args = probe.parse_args([https_url(server), "--ca-file", ca(server), "--stun-port", "0", "--count", "2"])
        assert await probe.probe(args, out) == 0, out.getvalue()
        for step in ("iroh-http", "iroh-login", "iroh-data", "iroh-ping"):
            assert f"ok   {step}" in out.getvalue()
        server.extra_routes.clear()  # a relay without iroh fails the probe, DERP steps still pass
        out = io.StringIO()
        assert await probe.probe(args, out) == 1
        assert "ok   packets" in out.getvalue() and "FAIL iroh-login" in out.getvalue()
        out = io.StringIO()
        assert await probe.probe(probe.parse_args([*map(str, [https_url(server), "--ca-file", ca(server),
                                                              "--stun-port", "0", "--no-iroh"])]), out) == 0
        assert "iroh" not in out.getvalue()
