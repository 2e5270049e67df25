"""The admin HTTP server every service runs: Prometheus `/metrics`, `/healthz` and `/readyz`.

`/healthz` answers 200 while the process can serve (the event loop is alive); `/readyz` answers 200
only while the service accepts new clients (listeners bound, state loaded, not draining), so a load
balancer stops sending traffic before a graceful shutdown.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class AdminServer:
    def __init__(self, registry: CollectorRegistry, ready: Callable[[], bool],
                 healthy: Callable[[], bool] = lambda: True, service: str = "",
                 detail: Callable[[], str] | None = None) -> None:
        self.registry = registry
        self.ready = ready
        self.detail = detail  # one more line for /readyz (e.g. a degraded mode that still serves)
        self.healthy = healthy
        self.service = service
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/", self._index)
        return app

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request: web.Request) -> web.Response:
        ok = self.healthy()
        return web.Response(text="ok\n" if ok else "unhealthy\n", status=200 if ok else 503)

    async def _readyz(self, _request: web.Request) -> web.Response:
        ok = self.ready()
        text = "ready\n" if ok else "not ready\n"
        if self.detail is not None:
            text += self.detail() + "\n"
        return web.Response(text=text, status=200 if ok else 503)

    async def _index(self, _request: web.Request) -> web.Response:
        return web.Response(text=f"burrow {self.service} admin: /metrics /healthz /readyz\n")

    async def start(self, host: str, port: int) -> int:
        """Bind and serve; returns the port (useful with port 0 in tests)."""
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server  # aiohttp keeps the asyncio Server here; only way to read port 0
        self.port = server.sockets[0].getsockname()[1] if server and server.sockets else port
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
