"""Through NATs: netcheck (what the network allows), port mapping (NAT-PMP, UPnP IGD), external direct
hints and TCP simultaneous open for Dilation and classic Transit. docs/nat.md explains them."""

# an ability both peers list (Dilation's dilation-abilities, classic Transit's abilities-v1) when each dials
# the other's direct hints from its own listening port, so the SYNs cross in the NATs (hints.dial_from);
# magic-wormhole and wormhole-william never read the peer's abilities, so they ignore it
SIMOPEN_ABILITY = {"type": "tcp-simultaneous-open-v1"}
