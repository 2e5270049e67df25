"""Several burrow-mailbox replicas on one Redis: real clients whose two sides talk to different replicas.

Everything is real and started here: Debian's redis-server (AOF, appendfsync always), HAProxy in TCP mode,
the mailbox replicas as processes, magic-wormhole 0.24 and wormhole-william as clients.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import websockets

from harness.haproxy import HAProxy
from harness.ports import free_port
from harness.redis import RedisCluster, RedisServer
from harness.wormhole_servers import MailboxProcess, TransitRelay, wormhole

pytestmark = [pytest.mark.interop]
NO_TRANSIT = "tcp:127.0.0.1:1"  # text needs no transit; a dead helper keeps clients off the internet


class Replica(MailboxProcess):
    """A mailbox replica on Redis with its admin port, so tests can read /readyz."""

    def __init__(self, tmp_path, redis_url: str, name: str, *extra: str) -> None:
        self.admin = free_port()
        super().__init__(str(tmp_path / f"{name}.sqlite"), extra=[
            "--redis-url", redis_url, "--replica-id", name, "--admin-port", str(self.admin), *extra])

    def start(self) -> Replica:
        super().start()
        return self

    def ready(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/readyz", timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code


def wait_ready(replica: Replica, status: int, timeout: float = 15) -> None:
    """Until /readyz answers `status` (the replica notices a lost Redis at its next health ping)."""
    deadline = time.monotonic() + timeout
    while replica.ready() != status:
        assert time.monotonic() < deadline, f"/readyz never answered {status}"
        time.sleep(0.1)


def start_replica(tmp_path, url: str, name: str, *extra: str) -> Replica:
    # MailboxProcess passes --admin-port -1 first; ours comes later on the command line and wins.
    return Replica(tmp_path, url, name, *extra).start()


@pytest.fixture
def redis(tmp_path):
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


@pytest.fixture
def replicas(tmp_path, redis):
    made = [start_replica(tmp_path, redis.url, f"r{i}") for i in (1, 2)]
    yield made
    for r in made:
        r.stop()


def balancer(tmp_path, replicas: list[Replica], extra: str = "") -> HAProxy:
    port = free_port()
    servers = "\n".join(f"    server s{i} 127.0.0.1:{r.port} check inter 200ms fall 1 rise 1{extra if i else ''}"
                        for i, r in enumerate(replicas))
    h = HAProxy(tmp_path / "haproxy", f"frontend mailbox\n    bind 127.0.0.1:{port}\n    default_backend be\n\n"
                f"backend be\n    balance roundrobin\n{servers}\n")
    h.port = port
    h.url = f"ws://127.0.0.1:{port}/v1"
    return h


def run_pair(send_cmd, recv_cmd, cwd, timeout=90, before_receive=None):
    sender = subprocess.Popen(send_cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if before_receive is not None:
            before_receive(sender)
        receiver = subprocess.run(recv_cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        out, _ = sender.communicate(timeout=timeout)
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
    return sender.returncode, out, receiver


def wait_for_code_line(sender: subprocess.Popen, timeout: float = 30) -> str:
    """Read the sender's output until it shows its code (it has allocated and added its PAKE message)."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = sender.stdout.readline()
        if not line:
            break
        seen.append(line)
        if "wormhole receive" in line or "Wormhole code is" in line:
            return line
    raise AssertionError(f"the sender printed no code: {''.join(seen)}")


def test_magic_wormhole_text_across_replicas(replicas, tmp_path):
    r1, r2 = replicas
    rc, out, rx = run_pair(wormhole(r1.url, NO_TRANSIT, "send", "--code", "7-cross-replica", "--text", "hi r2"),
                           wormhole(r2.url, NO_TRANSIT, "receive", "7-cross-replica"), tmp_path)
    assert rx.returncode == 0, rx.stderr
    assert rx.stdout.strip() == "hi r2"
    assert rc == 0, out


def test_magic_wormhole_file_and_directory_across_replicas(replicas, tmp_path):
    r1, r2 = replicas
    relay = TransitRelay()
    try:
        src, dst = tmp_path / "src", tmp_path / "dst"
        (src / "tree" / "sub").mkdir(parents=True)
        dst.mkdir()
        payload = bytes(range(256)) * 4000
        (src / "f.bin").write_bytes(payload)
        (src / "tree" / "a.txt").write_text("alpha")
        (src / "tree" / "sub" / "b.txt").write_text("beta")
        for what, code, send_on, recv_on in (("f.bin", "8-file-cross", r2, r1), ("tree", "9-dir-cross", r1, r2)):
            sender = subprocess.Popen(wormhole(send_on.url, relay.hint, "send", "--code", code, what), cwd=src,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                rx = subprocess.run(wormhole(recv_on.url, relay.hint, "receive", "--accept-file", code), cwd=dst,
                                    capture_output=True, text=True, timeout=90)
                out, _ = sender.communicate(timeout=90)
            finally:
                if sender.poll() is None:
                    sender.kill()
                    sender.wait()
            assert rx.returncode == 0 and sender.returncode == 0, (rx.stderr, out)
    finally:
        relay.stop()
    assert (dst / "f.bin").read_bytes() == payload
    assert (dst / "tree" / "a.txt").read_text() == "alpha"
    assert (dst / "tree" / "sub" / "b.txt").read_text() == "beta"


def test_william_and_magic_wormhole_on_different_replicas(replicas, tmp_path):
    william = shutil.which("wormhole-william")
    if william is None:
        pytest.fail("wormhole-william is not installed: apt-get install -y wormhole-william")
    r1, r2 = replicas
    rc, out, rx = run_pair([william, "send", "--relay-url", r1.url, "--code", "4-go-cross", "--text", "from go"],
                           wormhole(r2.url, NO_TRANSIT, "receive", "4-go-cross"), tmp_path)
    assert rx.returncode == 0, rx.stderr
    assert rx.stdout.strip() == "from go"
    assert rc == 0, out
    # allocated code on one replica, used on the other
    sender = subprocess.Popen(wormhole(r2.url, NO_TRANSIT, "send", "--text", "allocated"), cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = wait_for_code_line(sender)
        code = line.split()[-1]
        rx = subprocess.run([william, "receive", "--relay-url", r1.url, code], capture_output=True, text=True,
                            timeout=60)
        sender.communicate(timeout=60)
    finally:
        if sender.poll() is None:
            sender.kill()
    assert rx.returncode == 0, rx.stderr
    assert "allocated" in rx.stdout


async def _allocate(url: str, side: str) -> str:
    async with websockets.connect(url) as ws:
        await ws.recv()  # welcome
        await ws.send(json.dumps({"type": "bind", "appid": "race", "side": side}))
        await ws.send(json.dumps({"type": "allocate"}))
        while True:
            msg = json.loads(await ws.recv())
            if msg["type"] == "allocated":
                return msg["nameplate"]
            assert msg["type"] == "ack", msg


def test_concurrent_allocation_is_unique_across_replicas(replicas):
    async def main():
        return await asyncio.gather(*(_allocate(replicas[i % 2].url, f"s{i}") for i in range(60)))

    names = asyncio.run(main())
    assert len(set(names)) == 60
    assert all(1 <= len(n) <= 2 for n in names)  # one-digit names first, then two-digit ones


def test_replica_killed_mid_exchange_behind_haproxy(tmp_path, redis):
    r1 = start_replica(tmp_path, redis.url, "r1")
    r2 = start_replica(tmp_path, redis.url, "r2")
    lb = balancer(tmp_path, [r1, r2], extra=" backup")  # s0 (r1) serves until it dies, then s1 (r2)
    try:
        def kill_r1(sender):
            wait_for_code_line(sender)
            time.sleep(0.5)  # the PAKE message is stored in Redis
            r1.kill()

        rc, out, rx = run_pair(wormhole(lb.url, NO_TRANSIT, "send", "--code", "6-survive-kill", "--text", "alive"),
                               wormhole(lb.url, NO_TRANSIT, "receive", "6-survive-kill"), tmp_path,
                               before_receive=kill_r1)
        assert rx.returncode == 0, rx.stderr
        assert rx.stdout.strip() == "alive"
        assert rc == 0, out
    finally:
        lb.stop()
        r1.stop()
        r2.stop()


def test_sigterm_drains_clients_to_another_replica(tmp_path, redis):
    r1 = start_replica(tmp_path, redis.url, "r1", "--drain-timeout", "5")
    r2 = start_replica(tmp_path, redis.url, "r2")
    lb = balancer(tmp_path, [r1, r2], extra=" backup")
    try:
        def drain_r1(sender):
            wait_for_code_line(sender)
            time.sleep(0.5)
            r1.process.proc.terminate()
            assert r1.process.proc.wait(15) == 0  # it exits once its client moved

        rc, out, rx = run_pair(wormhole(lb.url, NO_TRANSIT, "send", "--code", "5-rolling", "--text", "upgraded"),
                               wormhole(lb.url, NO_TRANSIT, "receive", "5-rolling"), tmp_path,
                               before_receive=drain_r1)
        assert rx.returncode == 0, rx.stderr
        assert rx.stdout.strip() == "upgraded"
        assert rc == 0, out
    finally:
        lb.stop()
        r1.stop()
        r2.stop()


def test_redis_restart_loses_nothing_acknowledged(replicas, redis, tmp_path):
    r1, r2 = replicas

    def restart(sender):
        wait_for_code_line(sender)
        time.sleep(0.5)
        redis.stop()
        wait_ready(r1, 503)
        redis.start()
        deadline = time.monotonic() + 30
        while r1.ready() != 200 or r2.ready() != 200:
            assert time.monotonic() < deadline, "replicas never became ready again"
            time.sleep(0.2)

    rc, out, rx = run_pair(wormhole(r1.url, NO_TRANSIT, "send", "--code", "3-aof-always", "--text", "durable"),
                           wormhole(r2.url, NO_TRANSIT, "receive", "3-aof-always"), tmp_path,
                           before_receive=restart)
    assert rx.returncode == 0, rx.stderr
    assert rx.stdout.strip() == "durable"
    assert rc == 0, out


def test_redis_down_new_clients_get_a_clear_error(replicas, redis):
    r1, _ = replicas
    redis.stop()
    wait_ready(r1, 503)

    async def try_allocate():
        async with websockets.connect(r1.url) as ws:
            await ws.recv()
            await ws.send(json.dumps({"type": "bind", "appid": "down", "side": "x"}))
            await ws.send(json.dumps({"type": "allocate", "id": "1"}))
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if msg["type"] != "ack":
                    return msg

    msg = asyncio.run(try_allocate())
    assert msg["type"] == "error" and msg["error"] == "mailbox storage unavailable, try again later"
    redis.start()


def test_replicas_on_a_redis_cluster(tmp_path):
    cluster = RedisCluster(tmp_path / "cluster")
    made = []
    try:
        made = [start_replica(tmp_path, cluster.url, f"c{i}") for i in (1, 2)]
        for n in range(3):  # apps land in different slots, so on different masters
            app = f"example.com/app{n}"
            rc, out, rx = run_pair(
                wormhole(made[0].url, NO_TRANSIT, "--appid", app, "send", "--code", f"{n + 2}-slot", "--text", app),
                wormhole(made[1].url, NO_TRANSIT, "--appid", app, "receive", f"{n + 2}-slot"), tmp_path)
            assert rx.returncode == 0, rx.stderr
            assert rx.stdout.strip() == app
            assert rc == 0, out
    finally:
        for r in made:
            r.stop()
        cluster.stop()


async def _opened(url: str, side: str, mailbox: str | None = None):
    """A raw client bound on `url` with the mailbox open (allocating and claiming one if none is given)."""
    ws = await websockets.connect(url)
    await ws.recv()  # welcome
    await ws.send(json.dumps({"type": "bind", "appid": "order", "side": side}))
    if mailbox is None:
        await ws.send(json.dumps({"type": "allocate"}))
        name = (await _next(ws, "allocated"))["nameplate"]
        await ws.send(json.dumps({"type": "claim", "nameplate": name}))
        mailbox = (await _next(ws, "claimed"))["mailbox"]
    await ws.send(json.dumps({"type": "open", "mailbox": mailbox}))
    return ws, mailbox


async def _next(ws, kind: str) -> dict:
    while True:
        msg = json.loads(await asyncio.wait_for(ws.recv(), 15))
        if msg["type"] == kind:
            return msg


async def _messages(ws, n: int) -> list[tuple[str, str]]:
    return [(m["side"], m["phase"]) for m in [await _next(ws, "message") for _ in range(n)]]


def test_messages_keep_one_order_with_local_and_remote_adds(replicas):
    """Both sides add at once, each on its own replica: a replica delivers its own adds from the script's
    reply and the other side's from pub/sub, and every subscriber still sees every message in one order."""
    r1, r2 = replicas
    n = 60

    async def main():
        a, mailbox = await _opened(r1.url, "a")
        b, _ = await _opened(r2.url, "b", mailbox)
        watcher, _ = await _opened(r1.url, "a", mailbox)  # side a again (a reconnected client), never adds
        for i in range(n):  # no waiting between frames: the adds of both replicas interleave in Redis
            await a.send(json.dumps({"type": "add", "phase": f"a{i}", "body": "00"}))
            await b.send(json.dumps({"type": "add", "phase": f"b{i}", "body": "00"}))
        seen = await asyncio.gather(*(_messages(ws, 2 * n) for ws in (a, b, watcher)))
        for ws in (a, b, watcher):
            await ws.close()
        return seen

    seen_a, seen_b, seen_w = asyncio.run(main())
    assert len(set(seen_a)) == 2 * n
    assert seen_a == seen_b == seen_w
    assert [p for s, p in seen_a if s == "a"] == [f"a{i}" for i in range(n)]


def test_messages_flow_again_after_a_redis_restart_without_a_request(replicas, redis):
    """The replica of a side that only waits reconnects by itself and picks up what was added meanwhile."""
    r1, r2 = replicas

    async def main():
        a, mailbox = await _opened(r1.url, "a")
        b, _ = await _opened(r2.url, "b", mailbox)
        await b.send(json.dumps({"type": "add", "phase": "before", "body": "00"}))
        before = await _messages(a, 1)
        redis.stop()
        wait_ready(r2, 503)
        redis.start()
        wait_ready(r2, 200)
        await b.send(json.dumps({"type": "add", "phase": "after", "body": "00"}))
        after = await _messages(a, 1)  # `a` sends nothing: its replica must resubscribe on its own
        await a.close()
        await b.close()
        return before, after

    assert asyncio.run(main()) == ([("b", "before")], [("b", "after")])


def test_message_of_a_side_that_left_mid_add_reaches_the_other_side(replicas):
    """The adding side's connection drops while its `add` is out at Redis: the message is stored, and the
    other side on the same replica still gets it (it comes from the script's reply, not from pub/sub)."""
    r1, _ = replicas

    async def main():
        a, mailbox = await _opened(r1.url, "a")
        b, _ = await _opened(r1.url, "b", mailbox)
        # a's open and first add are done once b has that add: nothing of a's is at Redis any more, so
        # the next add goes out at once (a frame that arrives behind a request still out is only read,
        # not acknowledged, and a client that leaves before its turn never had it accepted)
        await a.send(json.dumps({"type": "add", "phase": "first", "body": "00"}))
        assert await _messages(b, 1) == [("a", "first")]
        await a.send(json.dumps({"type": "add", "phase": "last", "body": "00"}))
        a.transport.close()  # the add, then FIN: gone before the reply can come back
        got = await _messages(b, 1)
        await b.close()
        return got

    assert asyncio.run(main()) == [("a", "last")]


def test_a_burst_of_ops_runs_in_few_script_calls_with_each_reply_to_its_op(tmp_path, redis):
    """Two sides on one replica add back to back past the mailbox's message limit: the replica runs the
    queued ops of the app together in one script call, and each op still gets its own answer (the
    refused adds their error, to the side that sent them), in one order for both sides."""
    limit, n = 30, 20
    r1 = start_replica(tmp_path, redis.url, "r1", "--max-messages-per-mailbox", str(limit))

    async def side(ws, name: str) -> tuple[list[str], list[str]]:
        """Until every add is answered (a message back or an error): the messages seen, the refused phases."""
        seen, refused, mine = [], [], 0
        while mine + len(refused) < n or len(seen) < limit:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 15))
            if msg["type"] == "message":
                seen.append(msg["phase"])
                mine += msg["side"] == name
            elif msg["type"] == "error":
                assert msg["error"] == "mailbox is full", msg
                refused.append(msg["orig"]["phase"])
        return seen, refused

    async def main():
        a, mailbox = await _opened(r1.url, "a")
        b, _ = await _opened(r1.url, "b", mailbox)
        await asyncio.sleep(0.2)  # both opens done: what follows is only adds
        redis.cli("CONFIG", "RESETSTAT")
        for i in range(n):
            await a.send(json.dumps({"type": "add", "phase": f"a{i}", "body": "00"}))
            await b.send(json.dumps({"type": "add", "phase": f"b{i}", "body": "00"}))
        got = await asyncio.gather(side(a, "a"), side(b, "b"))
        await a.close()
        await b.close()
        return got

    try:
        (seen_a, refused_a), (seen_b, refused_b) = asyncio.run(main())
    finally:
        r1.stop()
    assert seen_a == seen_b and len(seen_a) == limit
    for name, refused in (("a", refused_a), ("b", refused_b)):
        kept = [p for p in seen_a if p[0] == name]
        assert kept + refused == [f"{name}{i}" for i in range(n)]  # each side's adds kept in order, then refused
    stats = redis.cli("INFO", "commandstats")
    calls = int(next(x for x in stats.splitlines() if x.startswith("cmdstat_evalsha:")).split("calls=")[1].split(",")[0])
    assert calls < 2 * n  # several ops per script call
