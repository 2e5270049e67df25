"""DERP relay client: DerpClient (client.py) and the `burrow relay-probe` check (probe.py)."""

from .client import DerpClient, DerpClientError, client_ssl_context

__all__ = ["DerpClient", "DerpClientError", "client_ssl_context"]
