"""Interop matrix: burrow <-> magic-wormhole 0.24 <-> wormhole-william, text / file / nested directory,
direct and relay-forced, plus wrong codes; through the reference servers and through ours.

The whole matrix runs inside a private network namespace (tests/client/interop_driver.py explains
why); this module runs the driver once per server kind and checks every scenario.
"""

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.client.interop_driver import TEXT, scenarios

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = scenarios()
KINDS = ["reference", "burrow"]

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module", params=KINDS)
def matrix(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"matrix-{request.param}") / "results.json"
    proc = subprocess.run(["unshare", "--net", "--mount", sys.executable, "-m", "tests.client.interop_driver",
                           "--servers", request.param, "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=850,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    retried = {r["id"]: r["retried_because"] for r in data["results"] if r.get("attempts", 1) > 1}
    if retried:  # known wormhole-william races (see interop_driver.WILLIAM_RACES): visible, not hidden
        warnings.warn(f"{request.param}: retried after a wormhole-william race: {retried}", stacklevel=1)
    return {r["id"]: r for r in data["results"]}, data["moods"]


def _explain(r: dict) -> str:
    return json.dumps({k: r[k] for k in ("sender_result", "receiver_result")}, indent=1)[-4000:]


def _path_word(stderr: str) -> str | None:
    """'direct' / 'relay' as reported by burrow ('Sending (relay ...)') or magic-wormhole ('->relay:'): the
    path last reported (a Dilated transfer between burrow peers starts on the relay and moves to a direct path
    when one works: 'Moved to a direct path (...)', 'Transfer complete (...)')."""
    said = [line for line in stderr.splitlines()
            if line.startswith(("Sending (", "Receiving (", "Connected (", "Moved to a direct path (",
                                "Transfer complete ("))]
    return None if not said else "relay" if "relay" in said[-1] else "direct"


@pytest.mark.parametrize("sc", [s for s in SCENARIOS if s["payload"] != "wrong-code"], ids=lambda s: s["id"])
def test_transfer(matrix, sc):
    r = matrix[0][sc["id"]]
    assert r["sender_result"]["rc"] == 0 and r["receiver_result"]["rc"] == 0, _explain(r)
    if sc["payload"] == "text":
        assert TEXT in r["receiver_result"]["stdout"]
        return
    assert r["expected_sha256"] and r["received_sha256"] == r["expected_sha256"]
    if sc["receiver"] == "burrow":  # it hashes for senders that check the digest, not for burrow's
        said = re.search(r"\(sha256 ([0-9a-f]{64})\)", r["receiver_result"]["stderr"])
        if sc["sender"] == "burrow":
            assert said is None, _explain(r)
        else:
            assert said is not None, _explain(r)
            if sc["payload"] == "file":
                assert said.group(1) == r["expected_sha256"]["."]
    for side in ("sender", "receiver"):
        if sc[side] in ("burrow", "wormhole"):  # wormhole-william does not say which path it used
            assert _path_word(r[f"{side}_result"]["stderr"]) == sc["mode"], _explain(r)


@pytest.mark.parametrize("sc", [s for s in SCENARIOS if s["payload"] == "wrong-code"], ids=lambda s: s["id"])
def test_wrong_code_fails_cleanly(matrix, sc):
    r = matrix[0][sc["id"]]
    burrow_side = "sender" if sc["sender"] == "burrow" else "receiver"
    other = "receiver" if burrow_side == "sender" else "sender"
    assert r[f"{burrow_side}_result"]["rc"] == 3, _explain(r)  # EXIT_WRONG_CODE
    assert "wrong code" in r[f"{burrow_side}_result"]["stderr"]
    assert r[f"{other}_result"]["rc"] not in (0, "timeout"), _explain(r)


def test_wrong_code_mailboxes_closed_scary(matrix):
    wrong = [s for s in SCENARIOS if s["payload"] == "wrong-code"]
    # wormhole-william as a wrong-code *sender* may exit without closing its side, so the server can keep
    # that mailbox (until pruning) and write no record for it; every other one must end "scary".
    expected = sum(1 for s in wrong if s["sender"] != "william")
    assert expected <= matrix[1].count("scary") <= len(wrong)
    assert "errory" not in matrix[1]
