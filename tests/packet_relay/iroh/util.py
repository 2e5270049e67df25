"""A real relay on 127.0.0.1 (ephemeral ports) serving iroh, and clients for it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import ssl

import aiohttp

from burrow.client.iroh.client import IrohRelayClient
from burrow.packet_relay.iroh.service import IrohService, IrohSettings

from ..derp_util import TIMEOUT, ca, running_relay

__all__ = ["TIMEOUT", "iroh_relay", "http_url", "https_url", "client", "metric", "events", "wait_for"]


@contextlib.asynccontextmanager
async def iroh_relay(tmp_path, settings: IrohSettings | None = None, **overrides):
    async with running_relay(tmp_path, _http=True, **overrides) as server:
        if settings is not None:
            server.iroh = IrohService(server, settings)  # re-claims /relay and /ping with these settings
        yield server


def http_url(server) -> str:
    return f"http://127.0.0.1:{server.http_port}"


def https_url(server) -> str:
    return f"https://127.0.0.1:{server.https_port}"


async def client(server, tls: bool = False, **kw) -> IrohRelayClient:
    if tls:
        c = IrohRelayClient(https_url(server), ssl_context=ssl.create_default_context(cafile=ca(server)), **kw)
    else:
        c = IrohRelayClient(http_url(server), **kw)
    await c.connect(TIMEOUT)
    return c


async def metric(server, name: str, **labels) -> float:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{server.admin_port}/metrics") as r:
            text = await r.text()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if m and m.group(1) == name and ",".join(sorted((m.group(2) or "").split(","))) == want:
            return float(m.group(3))
    return 0.0


def events(server, kind: str = "connection") -> list[dict]:
    path = server.config.event_log
    lines = [json.loads(x) for x in open(path).read().splitlines()] if os.path.exists(path) else []
    return [x for x in lines if x["event"] == kind]


async def wait_for(predicate, timeout: float = TIMEOUT) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)
