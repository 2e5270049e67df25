"""`--loop`: burrow-mailbox runs on uvloop unless told `--loop asyncio`, and serves clients on either."""

import asyncio
import json
import subprocess
import sys

import pytest
from websockets.asyncio.client import connect

pytestmark = pytest.mark.timeout(120)


async def serve_one_client(*args: str) -> str:
    """Start the server, get a welcome and a bind's ack over a real WebSocket, stop it; its log."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "burrow.mailbox_server", "--host", "127.0.0.1", "--port", "0", "--admin-port", "-1",
        "--db", ":memory:", *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert line.startswith("mailbox listening on port "), line
        port = int(line.split()[4])
        async with connect(f"ws://127.0.0.1:{port}/v1") as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "welcome"
            await ws.send(json.dumps({"type": "bind", "appid": "a", "side": "s", "id": "1"}))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "ack"
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    return err.decode()


async def test_uvloop_is_the_default_and_asyncio_the_escape_hatch():
    assert "uvloop event loop" in await serve_one_client()
    assert "asyncio event loop" in await serve_one_client("--loop", "asyncio")


def test_an_unknown_loop_is_a_one_line_error():
    done = subprocess.run([sys.executable, "-m", "burrow.mailbox_server", "--admin-port", "-1", "--db", ":memory:",
                           "--loop", "tokio"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == "burrow-mailbox: error: --loop must be uvloop or asyncio, not 'tokio'"
