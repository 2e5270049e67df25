"""Dilation: a durable, reconnecting, multiplexed encrypted connection on top of a wormhole.

Layers (one module each): framing (L2 bytes), noise (L2 crypto), selection (L2 race), connection (L3 records
and keepalive), reliable (L4), subchannel (L5), manager (L1 mailbox negotiation), aio (the asyncio face).
"""
