"""End to end with real processes: burrow-discovery (memory; or two replicas on one Redis behind haproxy),
two burrow-relay messaging servers, and `burrow messaging` clients delegated to different servers."""

from __future__ import annotations

import asyncio
import queue
import threading

import pytest

from burrow.client.messaging.aio import MessagingClient
from burrow.client.messaging.discovery import DiscoveryClient
from burrow.messaging import keys
from harness import messaging as hm
from harness.redis import RedisServer

pytestmark = pytest.mark.slow


class Lines:
    """A process's stdout, line by line, with a timeout on each read."""

    def __init__(self, proc) -> None:
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            self.q.put((line if isinstance(line, str) else line.decode()).rstrip("\n"))
        self.q.put(None)

    def next(self, timeout: float = 20.0) -> str | None:
        return self.q.get(timeout=timeout)


class Stack:
    """Everything a test started, stopped in reverse order at the end."""

    def __init__(self, tmp) -> None:
        self.tmp = tmp
        self.parts: list = []

    def add(self, part):
        self.parts.append(part)
        return part

    def stop(self) -> None:
        for part in reversed(self.parts):
            part.stop()


@pytest.fixture(params=["memory", "redis-2-replicas"])
def stack(request, tmp_path):
    p = Stack(tmp_path)
    try:
        if request.param == "memory":
            proc, url = hm.discovery(tmp_path, "discovery", None, 3.0)
            p.add(proc)
        else:
            redis = p.add(RedisServer(tmp_path / "redis", appendfsync="no"))
            urls = []
            for i in (1, 2):
                proc, replica_url = hm.discovery(tmp_path, f"d{i}", redis.url, 3.0)
                p.add(proc)
                urls.append(replica_url)
            balancer, url = hm.balanced(tmp_path, urls)
            p.add(balancer)
        relays = []
        for i in (1, 2):
            proc, addr = hm.relay(tmp_path, f"relay{i}", url, 0.5)
            relays.append((p.add(proc), addr))
        yield p, url, relays
    finally:
        p.stop()


def listen(p: Stack, name: str, url: str, *server: str) -> tuple[object, Lines, str]:
    args = ["listen", "--discovery", url, "--key-file", str(p.tmp / f"{name}.key"), "--refresh", "0.5"]
    for s in server:
        args += ["--server", s]
    proc = p.add(hm.client(p.tmp, name, *args))
    lines = Lines(proc.proc)
    first = lines.next()
    assert first and first.startswith("pk: "), (first, proc.stderr_path.read_text())
    return proc, lines, first[4:]


def send(p: Stack, name: str, url: str, server: str, to: str, text: str) -> int:
    proc = p.add(hm.client(p.tmp, name, "send", "--discovery", url, "--key-file", str(p.tmp / f"{name}.key"),
                           "--refresh", "0.5", "--server", server, to, text))
    rc = proc.proc.wait(30)
    assert rc == 0, proc.stderr_path.read_text()
    return rc


def test_cli_clients_on_different_relays_both_ways(stack):
    p, url, ((_, addr1), (_, addr2)) = stack
    host_port1 = addr1.partition("@")[2]  # the key of a bare host:port comes from available_servers
    _, lines1, pk1 = listen(p, "listener1", url, host_port1)
    _, lines2, pk2 = listen(p, "listener2", url, addr2)
    send(p, "sender2", url, addr2, pk1, "to one\nfrom two")
    assert lines1.next() == "to one\\nfrom two"
    send(p, "sender1", url, addr1, pk2, "to two from one")
    assert lines2.next() == "to two from one"


def test_library_channel_both_ways_across_relays(stack):
    p, url, ((_, addr1), (_, addr2)) = stack

    async def run() -> None:
        a = MessagingClient(keys.SecretKey.generate(), url, servers=[addr1], refresh=0.5)
        b = MessagingClient(keys.SecretKey.generate(), url, servers=[addr2], refresh=0.5)
        await a.start()
        await b.start()
        try:
            ch = await a.dial(b.public)
            inc = await asyncio.wait_for(b.accept(), 10)
            for i in range(50):
                await ch.send(b"a->b %d" % i)
                await inc.send(b"b->a %d" % i)
            assert [await inc.recv() for _ in range(50)] == [b"a->b %d" % i for i in range(50)]
            assert [await ch.recv() for _ in range(50)] == [b"b->a %d" % i for i in range(50)]
            await ch.close()
            assert ch.closed_reason == "closed"
        finally:
            await a.close()
            await b.close()

    asyncio.run(run())


def test_dead_relay_expires_and_its_client_re_delegates(stack):
    p, url, ((relay1, addr1), (_, addr2)) = stack
    key1 = bytes.fromhex(addr1.partition("@")[0])
    proc, lines, pk = listen(p, "wanderer", url, addr1)
    relay1.kill()  # no goodbye: its entry stays until it expires

    async def until_moved() -> None:
        disc = DiscoveryClient(url)
        try:
            async with asyncio.timeout(30):
                while True:
                    entry = await disc.entry(bytes.fromhex(pk))
                    listed = {e.static for e in await disc.available_servers()}
                    if entry and entry.client.delegated_servers == (bytes.fromhex(addr2.partition("@")[0]),) \
                            and key1 not in listed:
                        return
                    await asyncio.sleep(0.2)
        finally:
            await disc.close()

    asyncio.run(until_moved())
    send(p, "late-sender", url, addr2, pk, "still reachable")
    assert lines.next() == "still reachable"
    assert proc.alive()
