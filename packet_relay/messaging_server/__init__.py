"""The messaging server of Skywire's messaging system inside burrow-relay: links on a TCP port, the switch, discovery registration."""
