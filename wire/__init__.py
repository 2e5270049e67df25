"""What both ends speak, sans-IO: DERP (derp/), iroh relay frames and handshake (iroh/), the HTTP upgrade
(http.py), RFC 6455 WebSocket framing (websocket.py), STUN (stun.py) and Tailscale's Disco messages
(disco.py).

Servers and the client import from here; nothing here imports a server or the client.
"""
