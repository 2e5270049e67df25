"""Messaging client of Skywire's messaging system: discovery lookups, links to messaging servers, Noise KK channels."""
