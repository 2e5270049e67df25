"""The iroh relay protocol as both ends speak it: frames (frames.py) and the login handshake (handshake.py)."""
