"""DERP-compatible packet relay over HTTPS, with STUN on UDP (burrow-relay)."""
