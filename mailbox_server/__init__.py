"""Magic-Wormhole mailbox (rendezvous) server, wire-compatible with magic-wormhole 0.24 and wormhole-william."""
