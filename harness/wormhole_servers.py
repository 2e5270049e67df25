"""A mailbox + transit relay on 127.0.0.1 for client tests and benchmarks, ours or the reference ones.

kind="reference": the magic-wormhole reference servers from the venv (twist wormhole-mailbox /
twist transitrelay). kind="burrow": ours (python -m burrow.mailbox_server / python -m burrow.transit_relay).
BURROW_TEST_SERVERS picks the kind for the client tests (reference by default). The reference servers
cannot report an ephemeral port back, so a free port is reserved first.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .ports import free_port, wait_port
from .processes import ROOT, VENV_BIN, Process, kill, stop

WORMHOLE = str(VENV_BIN / "wormhole")
TWIST = str(VENV_BIN / "twist")


def servers_kind() -> str:
    """Which servers the client tests run against: BURROW_TEST_SERVERS=reference (default) or burrow."""
    kind = os.environ.get("BURROW_TEST_SERVERS", "reference")
    if kind not in ("reference", "burrow"):
        raise ValueError(f"BURROW_TEST_SERVERS must be reference or burrow, not {kind!r}")
    return kind


@dataclass
class Servers:
    kind: str
    mailbox_port: int
    transit_port: int
    procs: list[Process]
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
            p.stop(5)


def start_servers(kind: str, workdir: Path, transit_port: int | None = None) -> Servers:
    mport, tport = free_port(), transit_port or free_port()
    log = workdir / f"{kind}-servers.log"
    if kind == "reference":
        cmds = [
            [TWIST, "wormhole-mailbox", "--port", f"tcp:{mport}:interface=127.0.0.1",
             "--channel-db", str(workdir / "channel.sqlite"), "--usage-db", str(workdir / "usage.sqlite")],
            [TWIST, "transitrelay", "--port", f"tcp:{tport}:interface=127.0.0.1"],
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
    procs = [Process(c, log=log, cwd=workdir) for c in cmds]
    servers = Servers(kind, mport, tport, procs, workdir)
    try:
        wait_port(mport, procs[0].proc)
        wait_port(tport, procs[1].proc)
    except Exception:
        servers.stop()
        raise
    return servers


class MailboxProcess:
    """`python -m burrow.mailbox_server` on 127.0.0.1; `port` is read from its start-up line."""

    def __init__(self, db: str, port: int = 0, extra: list[str] | None = None) -> None:
        self.db = db
        self.port = port
        self.extra = extra or []
        self.process: Process | None = None

    @property
    def proc(self):
        return self.process.proc if self.process else None

    def start(self) -> MailboxProcess:
        self.process = Process([sys.executable, "-m", "burrow.mailbox_server", "--host", "127.0.0.1",
                                "--port", str(self.port), "--db", self.db, "--admin-port", "-1", *self.extra],
                               stderr=subprocess.DEVNULL)
        self.port = int(self.process.wait_line(r"listening on port (\d+)").group(1))
        return self

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1"

    def kill(self) -> None:
        if self.process is not None:
            kill(self.process.proc)

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process.proc)


class TransitRelay:
    """The reference transit relay (`twist transitrelay`) on a free loopback port, for file transfers."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process = Process([TWIST, "transitrelay", f"--port=tcp:{self.port}:interface=127.0.0.1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(self.port, self.process.proc)
        except Exception:
            self.stop()
            raise

    @property
    def hint(self) -> str:
        return f"tcp:127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.stop()


def wormhole(url: str, transit: str, *args: str) -> list[str]:
    """argv of the magic-wormhole 0.24 CLI pointed at these servers."""
    return [WORMHOLE, "--relay-url", url, "--transit-helper", transit, *args]


def relay_only_transfer(url: str, send_helper: str, receive_helper: str, workdir: Path, payload: bytes,
                        code: str) -> None:
    """magic-wormhole 0.24 sends `payload` as a file, both sides `--no-listen` (so only the transit
    relays can carry it), each with its own `--transit-helper`; raises unless both exit 0 and the
    received file is byte for byte the one sent."""
    src, dst = workdir / f"src-{code}", workdir / f"dst-{code}"
    src.mkdir()
    dst.mkdir()
    (src / "blob.bin").write_bytes(payload)
    sender = subprocess.Popen(wormhole(url, send_helper, "send", "--no-listen", "--hide-progress", "--code", code,
                                       str(src / "blob.bin")),
                              cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        rx = subprocess.run(wormhole(url, receive_helper, "receive", "--no-listen", "--hide-progress",
                                     "--accept-file", "-o", str(dst / "blob.bin"), code),
                            cwd=workdir, capture_output=True, text=True, timeout=90)
        out, _ = sender.communicate(timeout=60)
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
    if rx.returncode != 0 or sender.returncode != 0:
        raise AssertionError(f"receiver: {rx.returncode} {rx.stdout}{rx.stderr}\nsender: {sender.returncode} {out}")
    if (dst / "blob.bin").read_bytes() != payload:
        raise AssertionError("the received file differs from the one sent")


__all__ = ["ROOT", "VENV_BIN", "WORMHOLE", "TWIST", "MailboxProcess", "Servers", "TransitRelay", "relay_only_transfer",
           "servers_kind", "start_servers", "wormhole"]
