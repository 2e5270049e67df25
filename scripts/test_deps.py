"""The machine's tools the test suite drives: check them, install the missing ones (root), or name them.

`make test` runs this first. Every interop test needs its real peer, so a missing tool is never a silent
skip: as root with apt-get, the missing Debian packages are installed; otherwise this prints one line
naming what is missing and the command that installs it, and exits 1. `--check` only reports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

# command on PATH -> the Debian package that provides it (what the tests run, and why)
TOOLS = {
    "wormhole-william": "wormhole-william",   # the Go wormhole client (interop)
    "stun": "stun-client",                   # a classic STUN client (interop)
    "turnutils_stunclient": "coturn",        # coturn's STUN client (interop, STUN benchmark)
    "chromium": "chromium",                  # renders the Spark report (report tests)
    "ip": "iproute2",                        # private network namespaces
    "iptables": "iptables",                  # NAT and firewall rules inside them
    "unshare": "util-linux",
    "redis-server": "redis-server",          # shared state of the multi-replica tests
    "redis-cli": "redis-server",
    "haproxy": "haproxy",                    # the load balancer in front of replicas
    "podman": "podman",                      # the container smoke test
    "runc": "runc",
    "slirp4netns": "slirp4netns",
    "fuse-overlayfs": "fuse-overlayfs",
    "debootstrap": "debootstrap",
    "newuidmap": "uidmap",
    "miniupnpd": "miniupnpd-iptables",       # a UPnP/NAT-PMP router in the NAT test rig
    "java": "openjdk-17-jre-headless",       # PySpark
}
# packages with no command to look for
ALWAYS = ["libsodium23", "containernetworking-plugins",
          "golang-github-containernetworking-plugin-dnsname"]  # compose service names in the HA podman test


def missing_packages() -> list[str]:
    missing = sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})
    dpkg = shutil.which("dpkg-query")
    for pkg in ALWAYS:
        if dpkg and subprocess.run([dpkg, "-W", "-f=${Status}", pkg], capture_output=True,
                                   text=True).stdout.strip() != "install ok installed":
            missing.append(pkg)
    return missing


def main(argv: list[str]) -> int:
    missing = missing_packages()
    if not missing:
        return 0
    command = "apt-get install -y --no-install-recommends " + " ".join(missing)
    if "--check" in argv or os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"make test needs Debian packages that are missing: {' '.join(missing)}; "
              f"install them with: sudo apt-get update && sudo {command}", file=sys.stderr)
        return 1
    print(f"installing the test suite's Debian packages: {' '.join(missing)}", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(command.split(), check=True, env=env, stdout=subprocess.DEVNULL)
    still = missing_packages()
    if still:
        print(f"apt-get did not provide: {' '.join(still)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
