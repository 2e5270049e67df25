"""burrow-discovery: the messaging discovery of Skywire's messaging system (signed entries by public key, HTTP JSON)."""
