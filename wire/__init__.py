"""What both ends speak, sans-IO: DERP (derp/), iroh relay frames and handshake (iroh/), the HTTP upgrade
(http.py), RFC 6455 WebSocket framing (websocket.py) and STUN (stun.py).

Servers and the client import from here; nothing here imports a server or the client.
"""
