"""TLSSession (the relay's MemoryBIO TLS): every record's plaintext comes out whatever the read boundaries,
and a read that holds whole records decrypts them without a last read that can only fail."""

import ssl

from burrow.packet_relay.tls import generate_self_signed, server_context
from burrow.packet_relay.tlsio import TLSSession


class CountingSSLObject(ssl.SSLObject):
    reads = 0

    def read(self, *args, **kw):
        CountingSSLObject.reads += 1
        return super().read(*args, **kw)


def _pair(tmp_path):
    """A relay-side TLSSession with a client SSLObject, handshake done."""
    cert, key = generate_self_signed(str(tmp_path / "tls"))
    sctx = server_context(cert, key)
    sctx.sslobject_class = CountingSSLObject
    server = TLSSession(sctx)
    cctx = ssl.create_default_context(cafile=cert)
    c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = cctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    for _ in range(10):  # bounded handshake
        try:
            client.do_handshake()
            break
        except ssl.SSLWantReadError:
            plain, back = server.receive(c_out.read())
            assert plain == b""
            c_in.write(back)
    assert server.receive(c_out.read())[0] == b""  # the client's Finished
    assert server.handshaken

    def records(*chunks: bytes) -> bytes:
        for chunk in chunks:
            client.write(chunk)
        return c_out.read()

    return server, records


def test_whole_records_in_one_read_are_decrypted_without_a_failing_read(tmp_path):
    server, records = _pair(tmp_path)
    CountingSSLObject.reads = 0
    plain, _ = server.receive(records(b"a" * 9800))
    assert plain == b"a" * 9800
    assert CountingSSLObject.reads == 1  # one record, one read: no read that raises "want read"
    CountingSSLObject.reads = 0
    plain, _ = server.receive(records(b"b" * 3000, b"c" * 40000))  # 1 + 3 records in one socket read
    assert plain == b"b" * 3000 + b"c" * 40000
    assert CountingSSLObject.reads == 4


def test_records_split_anywhere_come_out_whole_and_in_order(tmp_path):
    parts = [bytes([i]) * (100 + 997 * i) for i in range(12)]  # up to 11 KB: several records per read
    for step in (1, 7, 333, 5000, 16 * 1024 + 29):
        server, records = _pair(tmp_path)
        wire = records(*parts)
        got = bytearray()
        for i in range(0, len(wire), step):
            plain, _ = server.receive(wire[i:i + step])
            got += plain
        assert bytes(got) == b"".join(parts), step
        assert not server.peer_closed
