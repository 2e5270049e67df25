"""burrow-discovery: the messaging discovery of seed 003 (signed entries by public key, HTTP JSON)."""
