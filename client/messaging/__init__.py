"""Messaging client of seed 003: discovery lookups, links to messaging servers, Noise KK channels."""
