"""Classic Transit: sans-IO hints, handshakes and records (protocol.py) and the asyncio connector (aio.py)."""
