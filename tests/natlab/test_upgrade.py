"""Leaving the transit relay mid-transfer: two burrow peers (real mailbox and transit relay) in one network
namespace whose iptables first reject (or drop) TCP to both peers' listening addresses, so the first generation
runs over the relay. The rule is removed while data flows both ways; the direct path is then found (rejected:
by the Leader's upgrade probe; dropped: by the relay-first generation's own dial, whose SYN the kernel sends
again), a new generation connects on it, and every byte arrives in order (SHA-256 both ways)."""

from __future__ import annotations

import asyncio
import hashlib
import threading

import pytest

from burrow.client.wormhole import Wormhole
from harness.natlab.rig import inside
from harness.wormhole_servers import servers_kind, start_servers

ADDRS = ("127.0.0.2", "127.0.0.3")  # each peer listens on its own loopback address
CHUNK = bytes(range(256)) * 256  # 64 KiB
BEFORE = 64  # chunks each side sends over the relay before the direct path opens
AFTER = 64  # chunks each side sends once the move is seen
MAX_CHUNKS = 4000  # the sender's bound if no move ever comes


def block(lab, ns: str, on: bool, drop: bool = False) -> None:
    target = ["DROP"] if drop else ["REJECT", "--reject-with", "tcp-reset"]
    for addr in ADDRS:
        lab.run(ns, ["iptables-nft", "-A" if on else "-D", "INPUT", "-p", "tcp", "-d", addr, "-j", *target])


async def scenario(lab, ns: str, servers, drop: bool, upgrade_interval: float) -> dict:
    ws = [Wormhole(servers.relay_url, transit_helper=servers.transit_helper, dilation=True) for _ in range(2)]
    for w in ws:
        await w.open()
    ws[0].allocate_code()
    ws[1].set_code(await ws[0].get_code())
    statuses = ([], [])
    ds = await asyncio.gather(*(
        w.dilate(listen_addresses=[addr], on_status=st.append, upgrade_interval=upgrade_interval)
        for w, addr, st in zip(ws, ADDRS, statuses, strict=True)))
    await asyncio.wait_for(asyncio.gather(*(d.when_connected() for d in ds)), 30)
    moved = asyncio.Event()
    opened = asyncio.Event()
    sent = [0, 0]

    def watch(st):
        if st.state == "connected" and st.path.startswith("direct"):
            moved.set()

    for d, st in zip(ds, statuses, strict=True):
        d._on_status = lambda s, st=st, f=d._on_status: (f(s), watch(s))

    async def send(i: int, writer) -> str:
        h = hashlib.sha256()
        extra = 0
        while sent[i] < MAX_CHUNKS and extra < AFTER:
            writer.write(CHUNK)
            h.update(CHUNK)
            sent[i] += 1
            await writer.drain()
            await asyncio.sleep(0.002)  # paced, so the transfer is still running when the path changes
            if sent[i] >= BEFORE and sent[0] >= BEFORE and sent[1] >= BEFORE and not opened.is_set():
                opened.set()
                await asyncio.to_thread(block, lab, ns, False, drop)
            if moved.is_set():
                extra += 1
        writer.close()
        return h.hexdigest()

    async def sink(listener) -> str:
        reader, _ = await listener.accept()
        h = hashlib.sha256()
        while chunk := await reader.read(1 << 20):
            h.update(chunk)
        return h.hexdigest()

    la, lb = ds[0].listen("blob"), ds[1].listen("blob")
    (r0, w0), (r1, w1) = await asyncio.gather(ds[0].open("blob"), ds[1].open("blob"))
    # what side 0 sends arrives at side 1's listener, and the other way round
    sent0, sent1, got0, got1 = await asyncio.wait_for(
        asyncio.gather(send(0, w0), send(1, w1), sink(lb), sink(la)), 120)
    result = {"sent": (sent0, sent1), "got": (got0, got1), "paths": [[s.path for s in st if s.state == "connected"]
                                                                   for st in statuses],
              "generations": [d.status.generation for d in ds], "upgrades": [d.counters["upgrades"] for d in ds],
              "chunks": list(sent), "leader": [d.leader for d in ds]}
    await asyncio.gather(*(d.close() for d in ds))
    await asyncio.gather(*(w.close() for w in ws), return_exceptions=True)
    return result


@pytest.mark.parametrize(("drop", "upgrade_interval"), [(False, 0.5), (True, 30.0)],
                         ids=["rejected-upgrade-probe", "dropped-relay-first"])
def test_transfer_moves_from_the_relay_to_a_direct_path_mid_transfer_without_losing_a_byte(
        lab, tmp_path, drop, upgrade_interval):
    # dropped-relay-first: the first upgrade look is 30 s away, so only the search behind the relay can move
    ns = lab.netns("upgrade")
    block(lab, ns, True, drop)
    out: dict = {}

    def run() -> None:
        try:
            with inside(ns):  # the servers' processes and every socket below live in the namespace
                (tmp_path / "servers").mkdir()
                servers = start_servers(servers_kind(), tmp_path / "servers")
                try:
                    out["result"] = asyncio.run(scenario(lab, ns, servers, drop, upgrade_interval))
                finally:
                    servers.stop()
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(180)
    assert not t.is_alive(), "the scenario did not finish"
    if "error" in out:
        raise out["error"]
    r = out["result"]
    assert r["sent"][0] == r["got"][0] and r["sent"][1] == r["got"][1]  # SHA-256 of every byte, both ways
    for paths in r["paths"]:
        assert paths[0].startswith("relay") and paths[-1].startswith("direct"), paths
    assert min(r["generations"]) >= 2
    assert r["upgrades"][r["leader"].index(True)] >= 1
    assert all(n < 4000 for n in r["chunks"])  # the move happened before the senders' bound
