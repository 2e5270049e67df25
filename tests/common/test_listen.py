"""common/listen.py: one meaning of --host for every server, and Nagle off on every accepted connection."""

import asyncio
import socket

import pytest

from burrow.common.listen import tcp_listener


async def _accepted_socket(host: str, connect_to: str) -> socket.socket:
    accepted: asyncio.Future = asyncio.get_running_loop().create_future()

    async def on_client(reader, writer):
        accepted.set_result(writer.get_extra_info("socket"))
        await reader.read()

    server = await asyncio.start_server(on_client, sock=tcp_listener(host, 0))
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection(connect_to, port)
    try:
        sock = await asyncio.wait_for(accepted, 5)
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        writer.close()
        server.close()


@pytest.mark.parametrize("host,connect_to", [("127.0.0.1", "127.0.0.1"), ("::", "127.0.0.1"), ("::", "::1")])
async def test_accepted_connections_have_nagle_off(host, connect_to):
    # small writes (mailbox messages, handshakes) must not wait for the peer's delayed ACK (40 ms)
    assert await _accepted_socket(host, connect_to) != 0


def test_double_colon_is_one_dual_stack_socket_and_other_hosts_are_one_address():
    sock = tcp_listener("::", 0)
    try:
        assert sock.family == socket.AF_INET6
        assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        port = sock.getsockname()[1]
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # IPv4 reaches it too
    finally:
        sock.close()
    v4 = tcp_listener("127.0.0.1", 0)
    try:
        assert v4.family == socket.AF_INET and v4.getsockname()[0] == "127.0.0.1"
    finally:
        v4.close()


def test_a_port_in_use_is_an_error_not_a_fallback():
    first = tcp_listener("::", 0)
    try:
        with pytest.raises(OSError):
            tcp_listener("::", first.getsockname()[1])
    finally:
        first.close()
