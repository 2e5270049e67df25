"""`burrow send --text` / `burrow receive` as processes: straight to the mailbox without loading `websockets`,
and through an HTTP CONNECT proxy when `https_proxy` names one."""

import asyncio
import os
import sys

import pytest

pytestmark = pytest.mark.timeout(120)


async def transfer(servers, code: str, env: dict, *python_flags: str) -> tuple[bytes, bytes, bytes]:
    """Sender and receiver started together with the code typed in advance: (text, sender's and
    receiver's stderr); both must exit 0."""
    common = ["--relay-url", servers.relay_url, "--transit-helper", servers.transit_helper, "--hide-progress"]
    run = [sys.executable, *python_flags, "-m", "burrow.client.cli"]
    full_env = {**os.environ, **env}
    send = await asyncio.create_subprocess_exec(*run, "send", *common, "--text", "through the mailbox",
                                                "--code", code, env=full_env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    receive = await asyncio.create_subprocess_exec(*run, "receive", *common, code, env=full_env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    (_, serr), (out, rerr) = await asyncio.wait_for(asyncio.gather(send.communicate(), receive.communicate()), 60)
    assert send.returncode == 0 and receive.returncode == 0, (serr.decode(), rerr.decode())
    return out, serr, rerr


async def test_a_text_transfer_does_not_load_websockets(wormhole_servers):
    out, serr, rerr = await transfer(wormhole_servers, "4402-uproot-vapor", {}, "-X", "importtime")
    assert out == b"through the mailbox\n"
    for err in (serr, rerr):
        imported = [line.rsplit("|", 1)[-1].strip() for line in err.decode().splitlines()
                    if line.startswith("import time:")]
        assert not [m for m in imported if m.startswith("websockets")]
        assert "burrow.client.mailbox_ws" in imported


async def test_a_text_transfer_goes_through_an_https_proxy(wormhole_servers):
    targets: list[str] = []

    async def connect_proxy(reader, writer):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        method, target, _ = head.split(" ", 2)
        targets.append(target)
        host, _, port = target.rpartition(":")
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(src, dst):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)

    proxy = await asyncio.start_server(connect_proxy, "127.0.0.1", 0)
    env = {"https_proxy": f"http://127.0.0.1:{proxy.sockets[0].getsockname()[1]}"}
    try:
        out, _, _ = await transfer(wormhole_servers, "4403-python-eyetooth", env)
    finally:
        proxy.close()
    assert out == b"through the mailbox\n"
    assert targets == [f"127.0.0.1:{wormhole_servers.mailbox_port}"] * 2  # sender and receiver
