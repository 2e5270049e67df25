"""Run the client interop matrix inside a private network namespace; print JSON results.

Run as: unshare --net --mount python -m tests.client.interop_driver --servers reference|burrow --out F
Inside the namespace: lo is up, /etc/hosts maps transit.magic-wormhole.io to 127.0.0.1 (wormhole-william
has no --transit-helper flag and always uses that relay), the transit relay listens on 4001 and an extra
lo address 10.77.0.1 exists only for "direct" scenarios, so magic-wormhole and wormhole-william (which
never advertise loopback) have a local address to offer. "relay" scenarios remove it and pass
--no-listen where the client supports it, so no direct hint exists at all.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.wormhole_servers import VENV_BIN, start_servers

CLIENTS = ("burrow", "wormhole", "william")
PAIRS = [("burrow", "wormhole"), ("wormhole", "burrow"), ("burrow", "william"), ("william", "burrow"),
         ("burrow", "burrow")]
TEXT = "hello from the burrow interop matrix 42"
SCENARIO_TIMEOUT = 90.0  # seconds per scenario
PARALLEL = 3  # scenarios run at once (2 shared cores)
EXTRA_ADDR = "10.77.0.1/24"


def scenarios() -> list[dict]:
    out = []
    for s, r in PAIRS:
        out.append({"sender": s, "receiver": r, "payload": "text", "mode": "mailbox"})
        for payload in ("file", "directory"):
            for mode in ("direct", "relay"):
                out.append({"sender": s, "receiver": r, "payload": payload, "mode": mode})
    for s, r in [("burrow", "wormhole"), ("wormhole", "burrow"), ("burrow", "william"), ("william", "burrow")]:
        out.append({"sender": s, "receiver": r, "payload": "wrong-code", "mode": "mailbox"})
    for sc in out:
        sc["id"] = f"{sc['sender']}->{sc['receiver']}-{sc['payload']}-{sc['mode']}"
    return out


def make_payloads(root: Path) -> dict:
    f = root / "payload.bin"
    f.write_bytes(os.urandom(2 * 1024 * 1024 + 123))
    tree = root / "tree"
    for rel, size in [("top.txt", 10), ("a/one.bin", 50_000), ("a/b/two.bin", 300_000), ("a/b/c/three.txt", 5)]:
        p = tree / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(os.urandom(size))
    return {"file": f, "directory": tree}


def sha_tree(path: Path) -> dict:
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def send_cmd(client: str, relay: str, transit: str, code: str, what: Path | None, no_listen: bool) -> list[str]:
    tail = ["--text", TEXT] if what is None else [str(what)]
    if client == "burrow":
        return [str(VENV_BIN / "burrow"), "send", "--relay-url", relay, "--transit-helper", transit,
                "--hide-progress", "--code", code] + (["--no-listen"] if no_listen else []) + tail
    if client == "wormhole":
        return [str(VENV_BIN / "wormhole"), "--relay-url", relay, "--transit-helper", transit, "send",
                "--hide-progress", "--code", code] + (["--no-listen"] if no_listen else []) + tail
    return ["wormhole-william", "--relay-url", relay, "send", "--hide-progress", "--code", code] + tail


def recv_cmd(client: str, relay: str, transit: str, code: str, no_listen: bool) -> list[str]:
    if client == "burrow":
        return [str(VENV_BIN / "burrow"), "receive", "--relay-url", relay, "--transit-helper", transit,
                "--hide-progress", "--accept-file"] + (["--no-listen"] if no_listen else []) + [code]
    if client == "wormhole":
        return [str(VENV_BIN / "wormhole"), "--relay-url", relay, "--transit-helper", transit, "receive",
                "--hide-progress", "--accept-file"] + (["--no-listen"] if no_listen else []) + [code]
    return ["wormhole-william", "--relay-url", relay, "receive", "--hide-progress", code]


async def run(cmd: list[str], cwd: Path, stdin: bytes = b"") -> dict:
    p = await asyncio.create_subprocess_exec(*cmd, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(p.communicate(stdin), SCENARIO_TIMEOUT)
    except TimeoutError:
        p.kill()
        out, err = await p.communicate()
        return {"rc": "timeout", "stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace")}
    return {"rc": p.returncode, "stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace")}


# Known wormhole-william races, seen only under heavy machine load, retried (and reported) rather than
# hidden: (1) as a relay *sender*, waitForRelayPeer's watchdog goroutine selects on a closed `okCh` and a
# closed `cancelCh` at once and may close the winning relay connection ("use of closed network
# connection"); (2) rarely, wormhole-william receiving text reports "decrypt message failed" with the right
# code (not reproduced in 80 host-side repetitions, with burrow or magic-wormhole as sender).
WILLIAM_RACES = ("use of closed network connection", "decrypt message failed")
MAX_ATTEMPTS = 8  # the race picks at random; 8 tries keep a false failure below 1 in 200


def william_race(res: dict) -> bool:
    if res["payload"] == "wrong-code" or "william" not in (res["sender"], res["receiver"]):
        return False
    side = "sender" if res["sender"] == "william" else "receiver"
    return res[f"{side}_result"]["rc"] not in (0, "timeout") and any(
        m in res[f"{side}_result"]["stderr"] for m in WILLIAM_RACES)


async def run_with_retries(sc: dict, n: int, servers, payloads: dict, work: Path) -> dict:
    attempts = []
    for attempt in range(MAX_ATTEMPTS):
        res = await run_one(sc, n * 10 + attempt, servers, payloads, work)
        attempts.append(res)
        if not william_race(res):
            break
    return {**attempts[-1], "attempts": len(attempts),
            "retried_because": [a["sender_result"]["stderr"][-200:] + a["receiver_result"]["stderr"][-200:]
                                for a in attempts[:-1]]}


async def run_one(sc: dict, n: int, servers, payloads: dict, work: Path) -> dict:
    code = f"{1000 + n}-purple-sausages"
    recv_code = code if sc["payload"] != "wrong-code" else f"{1000 + n}-purple-sausage"
    what = payloads.get(sc["payload"])
    no_listen = sc["mode"] == "relay"
    rdir = work / f"recv-{n}"
    rdir.mkdir()
    sdir = work / f"send-{n}"
    sdir.mkdir()
    sender = asyncio.ensure_future(run(send_cmd(sc["sender"], servers.relay_url, servers.transit_helper, code,
                                                what, no_listen), sdir))
    await asyncio.sleep(0.5)
    receiver = await run(recv_cmd(sc["receiver"], servers.relay_url, servers.transit_helper, recv_code, no_listen),
                         rdir, stdin=b"y\n")
    sent = await sender
    res = {**sc, "sender_result": sent, "receiver_result": receiver}
    if what is not None:
        got = rdir / what.name
        res["expected_sha256"] = sha_tree(what)
        res["received_sha256"] = sha_tree(got) if got.exists() else {}
    return res


def set_extra_address(present: bool) -> None:
    subprocess.run(["ip", "addr", "del", EXTRA_ADDR, "dev", "lo"], capture_output=True)
    if present:
        subprocess.run(["ip", "addr", "add", EXTRA_ADDR, "dev", "lo"], check=True)


def setup_namespace(work: Path) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    hosts = work / "hosts"
    hosts.write_text("127.0.0.1 localhost transit.magic-wormhole.io relay.magic-wormhole.io\n")
    subprocess.run(["mount", "--bind", str(hosts), "/etc/hosts"], check=True)


async def main_async(kind: str, out: Path, only: str | None) -> None:
    work = Path(tempfile.mkdtemp(prefix="burrow-interop-"))
    try:
        setup_namespace(work)
        servers = start_servers(kind, work, transit_port=4001)
        payloads = make_payloads(work)
        results = []
        sem = asyncio.Semaphore(PARALLEL)
        all_sc = [sc for sc in scenarios() if only is None or only in sc["id"]]
        try:
            for group in ("direct", "relay", "mailbox"):
                set_extra_address(group == "direct")
                batch = [(n, sc) for n, sc in enumerate(all_sc) if sc["mode"] == group]

                async def guarded(n, sc):
                    async with sem:
                        return await run_with_retries(sc, n, servers, payloads, work)

                results += await asyncio.gather(*(guarded(n, sc) for n, sc in batch))
        finally:
            servers.stop()
        out.write_text(json.dumps({"servers": kind, "results": results, "moods": servers.mailbox_moods()},
                                  indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", default="reference", choices=["reference", "burrow"])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", help="run scenarios whose id contains this")
    args = ap.parse_args()
    asyncio.run(main_async(args.servers, args.out, args.only))


if __name__ == "__main__":
    sys.exit(main())
