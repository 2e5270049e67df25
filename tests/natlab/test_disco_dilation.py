"""`burrow send --dilated` / `burrow receive` with a DERP relay named on both sides (--derp-relay): Dilation
offers the derp-disco-v1 hint, punches with Disco and, where no TCP path connects, carries the transfer
over QUIC on the punched UDP path. Bytes are compared by SHA-256 (harness/natlab/services.transfer)."""

from __future__ import annotations

import pytest

from harness.natlab import services
from harness.natlab.topology import build


def derp_args(servers) -> list[str]:
    # the lab's relay has a dev certificate; --insecure skips its check (the mailbox is plain ws://)
    return ["--derp-relay", f"https://{services.RELAY_NAME}:{services.RELAY_HTTPS}", "--insecure"]


@pytest.mark.slow
def test_tcp_blocked_transfer_goes_over_quic_on_the_punched_udp_path(lab):
    topo = build(lab, "udp-punch")
    servers = services.start_servers(lab, topo)
    result = services.transfer(lab, topo, servers, "a", "b", 5_000_000,
                               extra=[*derp_args(servers), "--transit-helper", services.DEAD_TRANSIT])
    assert result.bytes_ok, result.output
    assert result.path == "direct" and result.route.startswith("quic:"), result.output


@pytest.mark.slow
def test_eim_with_the_transit_relay_reports_the_chosen_path(lab):
    topo = build(lab, "eim")
    servers = services.start_servers(lab, topo)
    result = services.transfer(lab, topo, servers, "a", "b", 5_000_000, extra=derp_args(servers))
    assert result.bytes_ok, result.output
    assert result.path in ("direct", "relay") and result.route, result.output
    if result.route.startswith("quic:"):  # chosen only when no TCP attempt was left
        pytest.fail(f"QUIC chosen although TCP connects: {result.output}")
