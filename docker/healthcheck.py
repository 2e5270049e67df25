#!/opt/burrow/bin/python
"""Container HEALTHCHECK: GET the admin /healthz of the service PID 1 runs, with urllib (no curl).

The admin port comes from PID 1's `--admin-port` flag, else BURROW_<SERVICE>_ADMIN_PORT, else the
service's default. Exit 0 when /healthz answers 200, 1 otherwise (Docker's healthy/unhealthy).
"""

import os
import sys
import urllib.request

DEFAULT_ADMIN_PORTS = {"mailbox": 9400, "transit": 9401, "relay": 9402}


def pid1_argv() -> list[str]:
    with open("/proc/1/cmdline", "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]


def service_of(argv: list[str]) -> str | None:
    for arg in argv[:3]:  # [python, /opt/burrow/bin/burrow-mailbox, ...] or [burrow-mailbox, ...]
        name = os.path.basename(arg).removeprefix("burrow-")
        if name in DEFAULT_ADMIN_PORTS:
            return name
    return None


def admin_port(argv: list[str]) -> int | None:
    service = service_of(argv)
    if service is None:
        return None
    for i, arg in enumerate(argv):
        if arg == "--admin-port" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--admin-port="):
            return int(arg.split("=", 1)[1])
    env = os.environ.get(f"BURROW_{service.upper()}_ADMIN_PORT")
    return int(env) if env else DEFAULT_ADMIN_PORTS[service]


def main() -> int:
    port = admin_port(pid1_argv())
    if port is None:
        print("no Burrow service runs as PID 1; nothing to check")
        return 0
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=4) as resp:
            return 0 if resp.status == 200 else 1
    except OSError as exc:
        print(f"healthz on port {port}: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
