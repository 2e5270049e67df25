"""Burrow reference client: Magic-Wormhole codes, mailbox, SPAKE2, classic Transit, file transfer v1."""

__version__ = "0.1.0"
