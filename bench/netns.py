"""Network namespaces for benchmarks (root and `ip` needed for all but `congestion_control()`).

`--congestion cubic` (`add_congestion_option` / `apply_congestion`): the whole benchmark, servers and peers
included, runs in a private namespace that has only loopback, with cubic as its TCP congestion control
(`host`: the host's network as it is; a list runs each in turn). The TCP stack's costs depend on it: with
BBR, the default of some distributions and cloud images, every sender paces its packets with kernel timers
(loopback has no qdisc to pace for it), which in a VM costs a large part of a fast stream's CPU. Every
benchmark that takes the option prints the congestion control it ran with.

`VethPair`: two throwaway namespaces wired to the host through veth pairs, for benchmarks that want a
path closer to a real network than loopback.

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
import sys

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


def congestion_control() -> str:
    """The TCP congestion control new sockets of this network namespace get."""
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        return f.read().strip()


def set_congestion_control(name: str) -> None:
    """Set this network namespace's default TCP congestion control (the kernel loads its module if needed)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control", "w") as f:
            f.write(name)
    except OSError as e:
        raise SystemExit(f"cannot use TCP congestion control {name!r}: {e.strerror}") from None


def private_loopback(congestion: str) -> None:
    """Move this process into a new network namespace with only loopback, up, using `congestion`. Call it
    before any thread or event loop starts: the child processes started afterwards inherit the namespace,
    nothing outside it changes, and it disappears with the last process in it."""
    if _libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise SystemExit(f"unshare(CLONE_NEWNET): {os.strerror(err)} (--congestion needs root)")
    _ip("link", "set", "lo", "up")
    set_congestion_control(congestion)


def add_congestion_option(ap, default: str = "host") -> None:
    ap.add_argument("--congestion", default=default, metavar="LIST",
                    help="comma-separated network setups, run one after another: host (the host's network as it "
                         "is) or a TCP congestion control such as cubic (the Linux default) or bbr, run in a private "
                         f"loopback-only network namespace (root); default {default}")


def apply_congestion(args) -> str | None:
    """One setup: enter it (before any thread or event loop starts, so that every process started later
    inherits it) and return the words for the report header. Several: run this script again once per
    setup with the same arguments, and return None (the caller has nothing left to do)."""
    setups = [s for s in args.congestion.split(",") if s]
    if len(setups) > 1:
        for setup in setups:
            subprocess.run([sys.executable, sys.argv[0], *sys.argv[1:], "--congestion", setup], check=True)
        return None
    if setups and setups[0] != "host":
        private_loopback(setups[0])
        return f"TCP congestion control {congestion_control()} (private network namespace)"
    return f"TCP congestion control {congestion_control()} (the host's default)"


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
            congestion = congestion_control()  # new namespaces start with the first namespace's
            for side in "ab":
                with self.inside(side):
                    set_congestion_control(congestion)
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
