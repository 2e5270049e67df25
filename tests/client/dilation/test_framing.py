import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrow.client.dilation.errors import FramingError, NoiseError
from burrow.client.dilation.framing import (
    PROLOGUE_FOLLOWER,
    PROLOGUE_LEADER,
    Frame,
    Framer,
    PrologueOK,
    RelayOK,
    frame,
    hkdf,
    relay_handshake,
)
from burrow.client.dilation.noise import NOISE_MAX_CIPHERTEXT, NOISE_MAX_PAYLOAD, NoiseSession

KEY = bytes(range(32))


def test_prologue_literals():
    assert PROLOGUE_LEADER == b"Magic-Wormhole Dilation Handshake v1 Leader\n\n"
    assert PROLOGUE_FOLLOWER == b"Magic-Wormhole Dilation Handshake v1 Follower\n\n"


def test_hkdf_rfc5869_case3():
    # RFC 5869 test case 3: SHA-256, no salt, no info
    ikm = bytes.fromhex("0b" * 22)
    okm = hkdf(ikm, 42, b"")
    assert okm.hex() == ("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
                         "9d201395faa4b61a96c8")


def test_relay_handshake_is_sided_and_uses_dilation_key():
    line = relay_handshake(KEY, "0123456789abcdef")
    token = hkdf(KEY, 32, b"transit_relay_token").hex()
    assert line == f"please relay {token} for side 0123456789abcdef\n".encode()


def test_frame_vector():
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"


def test_framer_relay_prologue_frames_one_byte_at_a_time():
    f = Framer(PROLOGUE_LEADER, via_relay=True)
    stream = b"ok\n" + PROLOGUE_LEADER + frame(b"hello") + frame(b"") + frame(b"x" * 1000)
    tokens = []
    for i in range(len(stream)):
        tokens += f.feed(stream[i : i + 1])
    assert tokens == [RelayOK(), PrologueOK(), Frame(b"hello"), Frame(b""), Frame(b"x" * 1000)]


def test_framer_all_at_once():
    f = Framer(PROLOGUE_FOLLOWER, via_relay=False)
    assert f.feed(PROLOGUE_FOLLOWER + frame(b"a") + frame(b"bc") + b"\x00\x00") == [
        PrologueOK(), Frame(b"a"), Frame(b"bc")]
    assert f.feed(b"\x00\x01z") == [Frame(b"z")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(1, 400), min_size=1, max_size=40))
def test_framer_any_split_through_one_reused_buffer(payloads, cuts):
    """As L2Protocol reads: every chunk lands in the same buffer, and frames are consumed before the next."""
    f = Framer(PROLOGUE_LEADER, via_relay=False)
    stream = PROLOGUE_LEADER + b"".join(frame(p) for p in payloads)
    buf = bytearray(400)
    got, pos, i = [], 0, 0
    while pos < len(stream):
        n = min(cuts[i % len(cuts)], len(stream) - pos)
        i += 1
        buf[:n] = stream[pos : pos + n]
        got += [bytes(t.payload) for t in f.feed(memoryview(buf)[:n]) if isinstance(t, Frame)]
        buf[:n] = b"\xee" * n  # the next read overwrites the buffer
        pos += n
    assert got == payloads


@pytest.mark.parametrize("junk", [b"no\n", b"HTTP/1.1 400 Bad Request\r\n"])
def test_bad_relay_answer(junk):
    f = Framer(PROLOGUE_LEADER, via_relay=True)
    with pytest.raises(FramingError):
        f.feed(junk)
    with pytest.raises(FramingError):
        f.feed(b"ok\n")  # terminal


def test_wrong_prologue_rejected_early():
    f = Framer(PROLOGUE_FOLLOWER, via_relay=False)
    with pytest.raises(FramingError):
        f.feed(b"Magic-Wormhole Dilation Handshake v1 L")  # the Leader's prologue where we need the Follower's


def test_frame_limit():
    f = Framer(PROLOGUE_LEADER, via_relay=False, max_frame=100)
    f.feed(PROLOGUE_LEADER)
    with pytest.raises(FramingError):
        f.feed(b"\x00\x00\x00\x65")


def handshake():
    leader, follower = NoiseSession(KEY, leader=True), NoiseSession(KEY, leader=False)
    m1 = leader.leader_hello()
    m2 = follower.follower_answer(m1)
    leader.leader_finish(m2)
    return leader, follower


def test_noise_roundtrip_and_sizes():
    leader, follower = handshake()
    ct = leader.encrypt(b"\x00")
    assert len(ct) == 17
    assert follower.decrypt(ct) == b"\x00"
    assert leader.decrypt(follower.encrypt(b"pong")) == b"pong"


def test_multi_noise_message_frame():
    leader, follower = handshake()
    plaintext = bytes(i % 251 for i in range(2 * NOISE_MAX_PAYLOAD + 10))
    payload = leader.encrypt(plaintext)
    # three Noise messages concatenated in one frame: two full ones and a short tail
    assert len(payload) == 2 * NOISE_MAX_CIPHERTEXT + 10 + 16
    assert follower.decrypt(payload) == plaintext
    # exactly one Noise message's worth stays a single message
    one = leader.encrypt(b"y" * NOISE_MAX_PAYLOAD)
    assert len(one) == NOISE_MAX_CIPHERTEXT
    assert follower.decrypt(one) == b"y" * NOISE_MAX_PAYLOAD


def test_multi_noise_frame_interoperates_with_noiseprotocol_chunking():
    """The receiver of a chunked frame may be a plain noiseprotocol user decrypting 65535-byte steps."""
    from noise.connection import NoiseConnection

    ours = NoiseSession(KEY, leader=True)
    theirs = NoiseConnection.from_name(b"Noise_NNpsk0_25519_ChaChaPoly_BLAKE2s")
    theirs.set_psks(KEY)
    theirs.set_as_responder()
    theirs.start_handshake()
    theirs.read_message(ours.leader_hello())
    ours.leader_finish(theirs.write_message())
    plaintext = b"z" * 150_000
    payload = ours.encrypt(plaintext)
    got = b"".join(theirs.decrypt(payload[i : i + 65535]) for i in range(0, len(payload), 65535))
    assert got == plaintext
    assert ours.decrypt(theirs.encrypt(b"\x00")) == b"\x00"


def test_wrong_key_fails_handshake():
    leader = NoiseSession(KEY, leader=True)
    follower = NoiseSession(b"\x01" * 32, leader=False)
    with pytest.raises(NoiseError):
        follower.follower_answer(leader.leader_hello())


def test_tampered_message_fails():
    leader, follower = handshake()
    ct = bytearray(leader.encrypt(b"secret"))
    ct[0] ^= 1
    with pytest.raises(NoiseError):
        follower.decrypt(bytes(ct))


def test_sealed_frames_equal_frames_of_encrypt_of_concatenation():
    a1, f1 = handshake()
    a2, f2 = handshake()
    for size in (0, 10, NOISE_MAX_PAYLOAD - 9, NOISE_MAX_PAYLOAD - 8, 3 * NOISE_MAX_PAYLOAD + 5):
        head, body = b"H" * 9, bytes(i % 256 for i in range(size))
        sealed = a1.seal_frames([(head, body)])
        payload = memoryview(sealed)[4:]
        assert int.from_bytes(sealed[:4], "big") == len(payload)
        assert bytes(f1.decrypt(payload)) == head + body
        # the frame is Noise messages of at most 65535 bytes, each one opening on its own (as mw reads it)
        sealed2 = bytes(a2.seal_frames([(head, memoryview(body))]))[4:]
        pieces = [f2.decrypt(sealed2[i : i + NOISE_MAX_CIPHERTEXT]) for i in range(0, len(sealed2), NOISE_MAX_CIPHERTEXT)]
        assert b"".join(pieces) == head + body


def test_several_records_sealed_into_one_buffer_are_consecutive_frames():
    a, f = handshake()
    records = [(b"H" * 9, b"x" * n) for n in (0, 5, NOISE_MAX_PAYLOAD - 9, 2 * NOISE_MAX_PAYLOAD)] + [(b"ack!!", b"")]
    sealed = a.seal_frames(records)
    framer = Framer(PROLOGUE_LEADER, via_relay=False)
    frames = framer.feed(PROLOGUE_LEADER + bytes(sealed))[1:]
    assert [bytes(f.decrypt(fr.payload)) for fr in frames] == [h + b for h, b in records]


def test_a_truncated_piece_in_a_multi_message_frame_is_refused():
    a, f = handshake()
    sealed = a.seal_frames([(b"H" * 9, b"x" * (2 * NOISE_MAX_PAYLOAD))])
    with pytest.raises(NoiseError):
        f.decrypt(memoryview(sealed)[4:-20])  # the last Noise message is shorter than a tag
    a, f = handshake()
    sealed = a.seal_frames([(b"H" * 9, b"x" * (2 * NOISE_MAX_PAYLOAD))])
    with pytest.raises(NoiseError):
        f.decrypt(memoryview(sealed)[4:-5])  # the last Noise message loses part of its tag
