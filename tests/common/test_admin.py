import aiohttp
from prometheus_client import CollectorRegistry, Counter

from burrow.common.admin import AdminServer


async def test_admin_endpoints_on_loopback():
    registry = CollectorRegistry()
    hits = Counter("burrow_demo_hits_total", "demo", registry=registry)
    hits.inc(3)
    state = {"ready": False}
    admin = AdminServer(registry, ready=lambda: state["ready"], service="demo")
    port = await admin.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{port}"
            async with http.get(base + "/metrics") as r:
                assert r.status == 200
                assert "burrow_demo_hits_total 3.0" in await r.text()
            async with http.get(base + "/healthz") as r:
                assert r.status == 200
            async with http.get(base + "/readyz") as r:
                assert r.status == 503
            state["ready"] = True
            async with http.get(base + "/readyz") as r:
                assert r.status == 200
    finally:
        await admin.stop()


async def test_readyz_detail_follows_the_first_line():
    state = {"ready": True}
    admin = AdminServer(CollectorRegistry(), ready=lambda: state["ready"], service="demo",
                        detail=lambda: "links: 2/3 up")
    port = await admin.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                assert (r.status, await r.text()) == (200, "ready\nlinks: 2/3 up\n")
            state["ready"] = False
            async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                assert (r.status, await r.text()) == (503, "not ready\nlinks: 2/3 up\n")
    finally:
        await admin.stop()
