import pytest

from burrow.client.dilation.connection import (
    KCM,
    Ack,
    Close,
    Data,
    Keepalive,
    Open,
    Ping,
    Pong,
    RecordCodec,
    Stop,
)
from burrow.client.dilation.errors import RecordError

GED = RecordCodec("ged")
V1 = RecordCodec("1")

VECTORS = [
    (KCM(), "00"),
    (Ping(b"\x01\x02\x03\x04"), "0101020304"),
    (Pong(b"\x01\x02\x03\x04"), "0201020304"),
    (Open(2, 0, "echo"), "03" "00000002" "00000000" + b"echo".hex()),  # observed from 0.24 on the wire
    (Data(2, 1, b"hello"), "04" "00000002" "00000001" + b"hello".hex()),
    (Close(7, 9), "05" "00000007" "00000009"),
    (Ack(0), "0600000000"),
]


@pytest.mark.parametrize(("record", "hexbytes"), VECTORS)
def test_ged_vectors(record, hexbytes):
    assert GED.encode(record).hex() == hexbytes
    assert GED.decode(bytes.fromhex(hexbytes)) == record


@pytest.mark.parametrize("codec", [GED, V1], ids=["ged", "1"])
def test_stop_extension_record(codec):
    assert codec.encode(Stop()) == b"\x7f"
    assert codec.decode(b"\x7f") == Stop()
    with pytest.raises(RecordError):
        codec.decode(b"\x7f\x00")


def test_seed_version_1_numbering():
    assert V1.encode(KCM()) == b""
    assert V1.decode(b"") == KCM()
    assert V1.encode(Ping(b"abcd")) == b"\x00abcd"
    assert V1.encode(Ack(5)) == b"\x05\x00\x00\x00\x05"
    assert V1.encode(Open(1, 0, "x")).hex() == "020000000100000000"
    assert V1.decode(V1.encode(Open(1, 0, "x"))) == Open(1, 0, "")
    assert V1.decode(V1.encode(Data(3, 4, b"d"))) == Data(3, 4, b"d")


@pytest.mark.parametrize("bad", ["", "07", "0001", "01010203", "0600", "05000000010000000100", "03000000"])
def test_bad_records(bad):
    with pytest.raises(RecordError):
        GED.decode(bytes.fromhex(bad))


def test_open_name_must_be_utf8():
    with pytest.raises(RecordError):
        GED.decode(b"\x03" + bytes(8) + b"\xff")


def test_leader_keepalive_pings_and_detects_silence():
    ka = Keepalive(leader=True, interval=10.0, now=0.0)
    first = ka.tick(0.0)
    assert len(first) == 1 and isinstance(first[0], Ping)
    assert ka.tick(5.0) == []
    assert ka.next_deadline() == 10.0
    ka.received(10.5)
    second = ka.tick(10.0)
    assert isinstance(second[0], Ping) and second[0] != first[0]
    ka.received(12.0)  # the PONG
    assert isinstance(ka.tick(20.0)[0], Ping)
    assert isinstance(ka.tick(30.0)[0], Ping)  # 18 s of silence: still alive
    assert ka.tick(40.0) == ["dead"]  # 28 s >= 2 intervals of silence
    assert ka.tick(50.0) == []  # terminal


def test_follower_never_pings_for_ged():
    ka = Keepalive(leader=False, interval=1.0, now=0.0)
    assert [ka.tick(t) for t in (0.0, 5.0, 100.0)] == [[], [], []]


def test_follower_sends_unprovoked_pongs_for_version_1():
    ka = Keepalive(leader=False, interval=30.0, now=0.0, version="1")
    assert ka.tick(10.0) == []
    assert ka.tick(30.0) == [Pong(b"\x00\x00\x00\x00")]
    ka.sent(45.0)
    assert ka.tick(60.0) == []
    assert ka.tick(75.0) == [Pong(b"\x00\x00\x00\x00")]
