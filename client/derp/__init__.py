"""DERP relay client: DerpClient (client.py); `burrow relay-probe` lives in client/apps/relay_probe.py."""

from .client import DerpClient, DerpClientError, client_ssl_context

__all__ = ["DerpClient", "DerpClientError", "client_ssl_context"]
