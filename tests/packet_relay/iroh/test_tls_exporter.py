"""The `x-iroh-relay-client-auth-v1` header login over real TLS, with the exporter on both ends."""

import asyncio
import base64
import os
import ssl

import pytest
from nacl.signing import SigningKey

from burrow.packet_relay.iroh import tls_exporter
from burrow.wire.iroh import frames as f
from burrow.wire.iroh.handshake import challenge_message

from ..derp_util import ca
from .util import TIMEOUT, client, iroh_relay, metric

pytestmark = pytest.mark.skipif(not tls_exporter.available(), reason="no TLS exporter on this Python")


def test_exporter_self_check_and_context_binding():
    assert tls_exporter.self_check()


def test_header_codec_round_trip_and_limits():
    auth = f.KeyMaterialClientAuth(b"\x01" * 32, b"\x02" * 64, b"\x03" * 16)
    raw = b"\x01" * 32 + b"\x40" + b"\x02" * 64 + b"\x03" * 16
    assert auth.encode() == raw
    assert auth.header_value() == base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert f.KeyMaterialClientAuth.from_header(auth.header_value()) == auth
    for bad in ("***", base64.urlsafe_b64encode(raw[:-1]).decode(), "A" * 300):
        with pytest.raises(f.IrohProtocolError):
            f.KeyMaterialClientAuth.from_header(bad)


async def _open(server, key: SigningKey, *, tls: bool = True, corrupt_suffix: bool = False):
    pub = bytes(key.verify_key)
    if tls:
        ctx = ssl.create_default_context(cafile=ca(server))
        reader, writer = await asyncio.open_connection("127.0.0.1", server.https_port, ssl=ctx,
                                                       server_hostname="127.0.0.1")
        km = tls_exporter.export_keying_material(writer.get_extra_info("ssl_object"), tls_exporter.LABEL, pub, 32)
    else:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        km = os.urandom(32)
    suffix = bytes(16) if corrupt_suffix else km[16:]
    header = f.KeyMaterialClientAuth(pub, key.sign(km[:16]).signature, suffix).header_value()
    writer.write(("GET /relay HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                  "Sec-WebSocket-Protocol: iroh-relay-v2\r\n"
                  f"x-iroh-relay-client-auth-v1: {header}\r\n\r\n").encode())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
    assert head.startswith(b"HTTP/1.1 101")
    return reader, writer


async def _read_message(reader) -> bytes:
    b0, n = await asyncio.wait_for(reader.readexactly(2), TIMEOUT)
    assert b0 == 0x82 and n < 126
    return await reader.readexactly(n)


def _masked(message: bytes) -> bytes:
    from burrow.wire.websocket import encode_frame

    return encode_frame(0x2, message, mask=True)


async def test_valid_header_skips_the_challenge(tmp_path):
    key = SigningKey.generate()
    async with iroh_relay(tmp_path) as server:
        other = await client(server)
        reader, writer = await _open(server, key)
        assert f.decode(await _read_message(reader)) == f.ServerConfirmsAuth()
        writer.write(_masked(f.Datagrams(4, other.endpoint_id, b"\x00via header login").encode()))
        got = await other.recv(TIMEOUT)
        assert (got.peer, got.body) == (bytes(key.verify_key), b"\x00via header login")
        assert await metric(server, "burrow_relay_iroh_logins_total", mechanism="key_material") == 1
        writer.close()
        await other.close()


@pytest.mark.parametrize("case", ["mismatched_suffix", "plain_http"])
async def test_unverifiable_header_falls_back_to_the_challenge(tmp_path, case):
    key = SigningKey.generate()
    async with iroh_relay(tmp_path) as server:
        reader, writer = await _open(server, key, tls=case != "plain_http",
                                     corrupt_suffix=case == "mismatched_suffix")
        challenge = f.decode(await _read_message(reader))
        assert isinstance(challenge, f.ServerChallenge)
        sig = key.sign(challenge_message(challenge.challenge)).signature
        writer.write(_masked(f.ClientAuth(bytes(key.verify_key), sig).encode()))
        assert f.decode(await _read_message(reader)) == f.ServerConfirmsAuth()
        assert await metric(server, "burrow_relay_iroh_logins_total", mechanism="challenge") == 1
        writer.close()
