"""The NAT lab: network namespaces wired as an internet, NAT routers (iptables; miniupnpd for UPnP and
NAT-PMP) and peers behind them, plus the burrow servers and transfers run inside it. Needs root.

rig.py owns the namespaces, topology.py the scenarios, upnp.py miniupnpd, services.py the servers and
transfers, iroh_pair.py real iroh endpoints (iroh_peer.py, with iroh_trust.py's root); tests/natlab and
bench/nat.py use them.
"""
