"""Start a mailbox + transit relay pair on 127.0.0.1 for client tests.

kind="reference": the magic-wormhole reference servers from the venv (twist wormhole-mailbox /
twist transitrelay). kind="burrow": ours (python -m burrow.mailbox_server / python -m burrow.transit_relay).
The reference servers cannot report an ephemeral port back, so we reserve a free port first.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0  # seconds for a server to start listening


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server did not listen on {port} within {timeout}s")


@dataclass
class Servers:
    kind: str
    mailbox_port: int
    transit_port: int
    procs: list
    workdir: Path

    def mailbox_moods(self) -> list[str]:
        """The mood of every finished mailbox, from the server's own records (call after stop())."""
        if self.kind == "reference":
            db = sqlite3.connect(self.workdir / "usage.sqlite")
            try:
                return [r[0] for r in db.execute("SELECT result FROM mailboxes")]
            finally:
                db.close()
        path = self.workdir / "mailbox-events.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [e["mood"] for e in map(json.loads, lines) if e.get("event") == "mailbox"]

    @property
    def relay_url(self) -> str:
        return f"ws://127.0.0.1:{self.mailbox_port}/v1"

    @property
    def transit_helper(self) -> str:
        return f"tcp:127.0.0.1:{self.transit_port}"

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def start_servers(kind: str, workdir: Path, transit_port: int | None = None) -> Servers:
    mport, tport = free_port(), transit_port or free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = open(workdir / f"{kind}-servers.log", "ab")  # noqa: SIM115 (closed with the process)
    if kind == "reference":
        cmds = [
            [str(VENV_BIN / "twist"), "wormhole-mailbox", "--port", f"tcp:{mport}:interface=127.0.0.1",
             "--channel-db", str(workdir / "channel.sqlite"), "--usage-db", str(workdir / "usage.sqlite")],
            [str(VENV_BIN / "twist"), "transitrelay", "--port", f"tcp:{tport}:interface=127.0.0.1"],
        ]
    elif kind == "burrow":
        cmds = [
            [sys.executable, "-m", "burrow.mailbox_server", "--host", "127.0.0.1", "--port", str(mport),
             "--db", str(workdir / "mailbox.sqlite"), "--admin-port", "0",
             "--event-log", str(workdir / "mailbox-events.jsonl")],
            [sys.executable, "-m", "burrow.transit_relay", "--host", "127.0.0.1", "--port", str(tport),
             "--websocket-port", "0", "--admin-port", "0"],
        ]
    else:
        raise ValueError(kind)
    procs = [subprocess.Popen(c, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir) for c in cmds]
    servers = Servers(kind, mport, tport, procs, workdir)
    try:
        wait_listening(mport, procs[0])
        wait_listening(tport, procs[1])
    except Exception:
        servers.stop()
        raise
    return servers
