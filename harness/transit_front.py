"""The Helm chart's transit front end (transit.scaling: haproxy) run locally by the tests and benchmarks.

`front_config(replicas, ...)` renders the chart's own HAProxy configuration (helm/burrow, through the
Helm engine in helm-python-sdk) and points it at local replicas: the `bind` lines at ports on 127.0.0.1 (or the given host),
the `server transit-N` lines at host:port instead of the StatefulSet's DNS names. Everything else
(the token hash, consistent hashing, PROXY v2, health checks, the admin frontend) is the chart's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .processes import ROOT

CHART = ROOT / "helm" / "burrow"
_PORTS = {"tcp": 4001, "websocket": 4002, "admin": 9404}  # the chart's defaults, rewritten below


@dataclass(frozen=True)
class Replica:
    tcp_port: int
    websocket_port: int


def chart_config(replicas: int, maxconn: int = 2000) -> str:
    """haproxy.cfg of the chart's transit front end for `replicas` replicas."""
    import helm_python as helm  # the deploy extra

    # expose.mode separate: the chart refuses several HAProxy pods behind the one shared Service
    values = {"transit": {"replicas": replicas, "scaling": "haproxy", "haproxy": {"maxconn": maxconn}},
              "expose": {"mode": "separate"}}
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values, name="local", namespace="test", is_install=True)
    text = out["burrow/templates/transit-haproxy.yaml"]
    import yaml

    config_map = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "ConfigMap")
    return config_map["data"]["haproxy.cfg"]


def front_config(replicas: list[Replica], tcp_port: int, websocket_port: int, admin_port: int,
                 host: str = "127.0.0.1") -> str:
    """The chart's configuration with its listeners and servers on `host`."""
    text = chart_config(len(replicas))
    binds = {_PORTS["tcp"]: tcp_port, _PORTS["websocket"]: websocket_port, _PORTS["admin"]: admin_port}
    text, n = re.subn(r"bind :(\d+)", lambda m: f"bind {host}:{binds[int(m.group(1))]}", text)
    assert n == 3, text

    def server(m: re.Match) -> str:
        replica = replicas[int(m.group(1))]
        port = replica.tcp_port if int(m.group(2)) == _PORTS["tcp"] else replica.websocket_port
        return f"server transit-{m.group(1)} {host}:{port}"

    text, n = re.subn(r"server transit-(\d+) \S+:(\d+)", server, text)
    assert n == 2 * len(replicas), text
    return text
