"""Skywire messaging, sans-IO: keys, link handshake, frames, Noise KK channels, discovery entries, the server switch."""
