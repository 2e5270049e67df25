"""Simultaneous-open dials (client/nat/hints.py dial_from) on 127.0.0.1."""

import asyncio
import socket

from burrow.client.nat.hints import SIMOPEN_WINDOW, dial_from, listening_sockets


async def test_a_refused_loopback_dial_fails_at_once_instead_of_redialling_for_the_window():
    # a peer's 127.0.0.1 hint names its own host: nothing listens on ours, and no NAT on the way will open
    socks = listening_sockets()
    port = socks[0].getsockname()[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    try:
        try:
            await asyncio.wait_for(dial_from(port, "127.0.0.1", dead, 30.0), SIMOPEN_WINDOW / 2)
            raise AssertionError("connected to a closed port")
        except ConnectionRefusedError:
            pass  # not TimeoutError: a re-dialling loop would still run when wait_for gives up
    finally:
        for s in socks:
            s.close()
