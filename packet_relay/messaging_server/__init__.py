"""The messaging server of seed 003 inside burrow-relay: links on a TCP port, the switch, discovery registration."""
