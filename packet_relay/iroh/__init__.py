"""The iroh relay protocol (WebSocket at /relay, Ed25519 challenge login, iroh-relay-v1/v2 frames)."""
