"""Two throwaway network namespaces wired to the host through veth pairs, for benchmarks that want a
path closer to a real network than loopback (needs root and `ip`).

    host ns:  vbA 10.201.1.1/24  <-veth->  ns A: pbA 10.201.1.2/24 (default route via 10.201.1.1)
              vbB 10.201.2.1/24  <-veth->  ns B: pbB 10.201.2.2/24 (default route via 10.201.2.1)

A server in the host namespace listening on 10.201.1.1 is reached from both namespaces (from B over
vbB: the address is local to the host). With forwarding on, A and B reach each other through the
host: the "direct" path a relay is compared with. Sockets are made inside a namespace with
`inside(name)`, which moves only the calling thread (setns) and moves it back; a socket stays in
the namespace it was created in.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess

CLONE_NEWNET = 0x40000000
HOST_ADDR = {"a": "10.201.1.1", "b": "10.201.2.1"}
PEER_ADDR = {"a": "10.201.1.2", "b": "10.201.2.2"}
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class VethPair:
    """Creates the namespaces on enter, removes them (and restores ip_forward) on exit."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}"
        self.names = {side: f"bb{side}{tag}" for side in "ab"}
        self.links = {side: f"vb{side.upper()}{tag}" for side in "ab"}
        self._forward: str | None = None

    def __enter__(self) -> VethPair:
        try:
            for i, side in enumerate("ab", start=1):
                ns, host_if, peer_if = self.names[side], self.links[side], f"p{self.links[side]}"
                _ip("netns", "add", ns)
                _ip("link", "add", host_if, "type", "veth", "peer", "name", peer_if)
                _ip("link", "set", peer_if, "netns", ns)
                _ip("addr", "add", f"10.201.{i}.1/24", "dev", host_if)
                _ip("link", "set", host_if, "up")
                _ip("-n", ns, "addr", "add", f"10.201.{i}.2/24", "dev", peer_if)
                _ip("-n", ns, "link", "set", peer_if, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "route", "add", "default", "via", f"10.201.{i}.1")
            with open("/proc/sys/net/ipv4/ip_forward") as f:
                self._forward = f.read().strip()
            with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
                f.write("1")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._forward is not None:
            with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
                f.write(self._forward)
        for side in "ab":
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "del", self.links[side])  # removes its peer too
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", self.names[side])

    @contextlib.contextmanager
    def inside(self, side: str):
        """Run the body with this thread in namespace `side` ("a" or "b")."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/var/run/netns/{self.names[side]}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(home)
        finally:
            os.close(target)
            os.close(home)
