import pytest

from burrow.client.dilation.connection import Data, RecordCodec
from burrow.client.dilation.errors import ProtocolError
from burrow.client.dilation.framing import PROLOGUE_FOLLOWER, PROLOGUE_LEADER, hkdf
from burrow.client.dilation.manager import (
    Abandon,
    Failed,
    LateHints,
    Manager,
    Send,
    StartConnecting,
    Status,
    StopConnecting,
    UseHints,
    choose_version,
)
from burrow.client.dilation.selection import Attempt, Selected, Selector, UpgradePolicy, Viable, dial_delays

KEY = hkdf(b"master", 32, b"dilation-v1")


def attempt(leader, *, key=KEY, via_relay=False, direct=True, quic=False):
    return Attempt(key, leader=leader, side=("f" if leader else "0") * 16, via_relay=via_relay, direct=direct,
                   description="t", codec=RecordCodec("ged"), quic=quic)


def pump(a, b, first_a: bytes, first_b: bytes):
    """Run two attempts against each other until quiet; returns (events of a, events of b)."""
    ev_a, ev_b = [], []
    to_a, to_b = first_b, first_a
    while to_a or to_b:
        out, ev = b.feed(to_b)
        ev_b += ev
        to_b = b""
        out2, ev2 = a.feed(to_a)
        ev_a += ev2
        to_a = out
        to_b = out2
    return ev_a, ev_b


def test_leader_follower_handshake_kcm_and_selection():
    leader, follower = attempt(True), attempt(False)
    assert leader.start() == PROLOGUE_LEADER and follower.start() == PROLOGUE_FOLLOWER
    ev_l, ev_f = pump(leader, follower, leader.start(), follower.start())
    assert ev_l == [Viable()] and ev_f == []  # the Follower's KCM made the Leader's attempt a candidate
    assert leader.state == "viable" and follower.state == "kcm"
    kcm_frame = leader.select()
    rec = leader.encrypt(Data(1, 0, b"hi"))
    _, ev = follower.feed(kcm_frame + rec)
    assert ev == [Selected(), Data(1, 0, b"hi")]
    _, ev = leader.feed(follower.encrypt(Data(2, 0, b"yo")))
    assert ev == [Data(2, 0, b"yo")]


def test_relay_attempt_waits_for_ok():
    leader = attempt(True, via_relay=True)
    first = leader.start()
    assert first.startswith(b"please relay ") and first.endswith(b" for side " + b"f" * 16 + b"\n")
    out, ev = leader.feed(b"ok\n")
    assert out == PROLOGUE_LEADER and ev == []
    out, _ = leader.feed(PROLOGUE_FOLLOWER)
    assert out[:4] == len(out[4:]).to_bytes(4, "big")  # handshake message 1, framed


def test_wrong_key_is_never_viable():
    leader, follower = attempt(True), attempt(False, key=b"\x00" * 32)
    with pytest.raises(ProtocolError):
        pump(leader, follower, leader.start(), follower.start())


def test_same_role_prologue_mismatch():
    a, b = attempt(True), attempt(True)
    with pytest.raises(ProtocolError):
        a.feed(b.start())


def viable(direct, quic=False):
    leader, follower = attempt(True, direct=direct, quic=quic), attempt(False)
    pump(leader, follower, leader.start(), follower.start())
    return leader


def test_selector_prefers_direct_and_gives_head_start():
    s = Selector(now=0.0, relay_head_start=2.0)
    relay = viable(direct=False)
    assert s.candidate(relay, 0.5, direct_alive=True) is None
    assert s.deadline() == 2.0
    direct = viable(direct=True)
    assert s.candidate(direct, 1.0, direct_alive=True) is direct
    assert s.chosen is direct and s.tick(5.0, True) is None


def test_selector_takes_relay_after_head_start_or_when_no_direct_left():
    s = Selector(now=0.0, relay_head_start=2.0)
    relay = viable(direct=False)
    assert s.candidate(relay, 0.1, direct_alive=True) is None
    assert s.tick(1.9, True) is None
    assert s.tick(2.0, True) is relay
    s2 = Selector(now=0.0, relay_head_start=2.0)
    assert s2.candidate(viable(direct=False), 0.1, direct_alive=False) is not None


def test_selector_takes_quic_only_when_no_tcp_attempt_is_left():
    s = Selector(now=0.0, relay_head_start=2.0)
    quic = viable(direct=False, quic=True)
    assert s.candidate(quic, 0.1, direct_alive=False, tcp_alive=True) is None
    assert s.tick(3.9, False, tcp_alive=True) is None  # a relayed TCP dial may still connect: wait for it
    relay = viable(direct=False)
    assert s.candidate(relay, 3.95, direct_alive=False, tcp_alive=True) is relay  # TCP relay beats QUIC
    s2 = Selector(now=0.0, relay_head_start=2.0)
    quic2 = viable(direct=False, quic=True)
    assert s2.candidate(quic2, 0.1, direct_alive=True, tcp_alive=True) is None
    assert s2.waiting and s2.tick(0.2, False, tcp_alive=False) is quic2


def test_selector_takes_quic_without_waiting_out_tcp_dials_that_hang():
    # direct TCP dials into NATs that drop them stay alive for their whole connect timeout: QUIC waits only for
    # the head start when the relay is dead, and a grace after it while a relayed dial is still pending
    s = Selector(now=0.0, relay_head_start=2.0, quic_grace=2.0)
    quic = viable(direct=False, quic=True)
    assert s.candidate(quic, 0.5, direct_alive=True, tcp_alive=True, relay_alive=False) is None
    assert s.tick(1.9, True, tcp_alive=True, relay_alive=False) is None
    assert s.tick(2.0, True, tcp_alive=True, relay_alive=False) is quic
    s2 = Selector(now=0.0, relay_head_start=2.0, quic_grace=2.0)
    quic2 = viable(direct=False, quic=True)
    assert s2.candidate(quic2, 0.5, direct_alive=True, tcp_alive=True, relay_alive=True) is None
    assert s2.tick(3.9, True, tcp_alive=True, relay_alive=True) is None
    assert s2.tick(4.0, True, tcp_alive=True, relay_alive=True) is quic2
    s3 = Selector(now=0.0, relay_head_start=2.0)  # a direct TCP candidate still wins at once
    assert s3.candidate(viable(direct=False, quic=True), 0.5, True, relay_alive=False) is None
    direct = viable(direct=True)
    assert s3.candidate(direct, 1.0, True, relay_alive=False) is direct


def test_selector_prefers_quic_over_the_relay_once_measured_faster():
    s = Selector(now=0.0, relay_head_start=2.0, quic_grace=2.0, prefer_quic=True)
    relay, quic = viable(direct=False), viable(direct=False, quic=True)
    assert s.candidate(relay, 0.5, direct_alive=False) is None  # the relay waits for QUIC
    assert s.tick(3.9, False) is None
    assert s.candidate(quic, 3.95, direct_alive=False) is quic
    s1 = Selector(now=0.0, relay_head_start=2.0, quic_grace=2.0, prefer_quic=True)
    relay1 = viable(direct=False)
    assert s1.candidate(relay1, 0.5, direct_alive=False) is None
    assert s1.tick(4.0, False) is relay1  # no QUIC candidate within the grace: the relay after all
    s2 = Selector(now=0.0, relay_head_start=2.0, prefer_quic=True)
    assert s2.candidate(viable(direct=False, quic=True), 0.5, direct_alive=True) is None
    direct = viable(direct=True)
    assert s2.candidate(direct, 0.7, direct_alive=True) is direct


def kinds(actions):
    return [type(a).__name__ for a in actions]


def please(side):
    return {"type": "please", "side": side, "use-version": "ged"}


def test_version_choice():
    assert choose_version(("ged", "1"), ["1", "ged"]) == "ged"
    assert choose_version(("ged", "1"), ["1"]) == "1"
    assert choose_version(("ged",), ["1"]) is None
    m = Manager(side="a" * 16)
    assert m.start({"can-dilate": ["zzz"]}) == [Failed("peer cannot dilate: no shared version in ['zzz']")]


def test_dilate_phase_counter_and_leader_flow():
    m = Manager(side="f" * 16)
    out = m.start({"can-dilate": ["ged"]})
    assert out[0] == Send("dilate-0", {"type": "please", "side": "f" * 16, "use-version": "ged"})
    out = m.receive(please("0" * 16))
    assert m.leader is True and out == [StartConnecting(1), Status("connecting")]
    assert m.receive({"type": "connection-hints", "hints": [1]}) == [UseHints(1, [1])]
    assert m.connection_made() == [StopConnecting(1)]
    assert m.receive({"type": "connection-hints", "hints": [2]}) == [LateHints(1, [2])]  # too late to dial
    out = m.connection_lost()
    assert out == [Send("dilate-1", {"type": "reconnect"}), Status("reconnecting")]
    assert m.state == "FLUSHING"
    assert m.receive({"type": "connection-hints", "hints": [3]}) == []  # stale hints of the old generation
    out = m.receive({"type": "reconnecting"})
    assert out == [StartConnecting(2), Status("reconnecting")]
    assert m.connection_made() == [StopConnecting(2)]


def test_follower_flows_lonely_abandoning_connecting():
    m = Manager(side="0" * 16)
    m.start({"can-dilate": ["ged"]})
    m.receive(please("f" * 16))
    assert m.leader is False
    m.connection_made()
    # it noticed the loss first: wait for the Leader
    assert m.connection_lost() == [Status("reconnecting")]
    assert m.state == "LONELY"
    out = m.receive({"type": "reconnect"})
    assert out == [Send("dilate-1", {"type": "reconnecting"}), StartConnecting(2), Status("reconnecting")]
    m.connection_made()
    # the Leader noticed first: abandon the seemingly good connection, then answer
    assert m.receive({"type": "reconnect"}) == [Abandon()]
    out = m.connection_lost()
    assert out == [Send("dilate-2", {"type": "reconnecting"}), StartConnecting(3), Status("reconnecting")]
    # reconnect while still connecting: stop this generation before the next (generations never overlap)
    out = m.receive({"type": "reconnect"})
    assert kinds(out) == ["StopConnecting", "Send", "StartConnecting", "Status"]
    assert out[0] == StopConnecting(3) and out[2] == StartConnecting(4)


def test_messages_before_start_are_replayed():
    m = Manager(side="0" * 16)
    assert m.receive(please("f" * 16)) == []
    out = m.start({"can-dilate": ["ged", "1"]})
    assert kinds(out) == ["Send", "Status", "StartConnecting", "Status"]


def test_leader_retries_a_generation_that_never_connects():
    m = Manager(side="f" * 16)
    m.start({"can-dilate": ["ged"]})
    m.receive(please("0" * 16))
    out = m.leader_gave_up_connecting()
    assert out == [StopConnecting(1), Send("dilate-1", {"type": "reconnect"}), Status("reconnecting")]
    assert m.receive({"type": "reconnecting"})[0] == StartConnecting(2)


def test_reflection_and_role_messages_from_wrong_side():
    m = Manager(side="a" * 16)
    m.start({"can-dilate": ["ged"]})
    assert kinds(m.receive(please("a" * 16))) == ["Failed"]
    f = Manager(side="0" * 16)
    f.start({"can-dilate": ["ged"]})
    f.receive(please("f" * 16))
    assert f.receive({"type": "reconnecting"}) == []  # only a Leader acts on reconnecting


def test_stop():
    m = Manager(side="f" * 16)
    m.start({"can-dilate": ["ged"]})
    m.receive(please("0" * 16))
    m.connection_made()
    assert m.stop() == [Abandon()]
    assert m.connection_lost() == [Status("stopped")]
    assert m.state == "STOPPED"


def test_peer_stopped_goes_straight_to_stopped():
    m = Manager(side="0" * 16)
    m.start({"can-dilate": ["ged"]})
    m.receive(please("f" * 16))
    m.connection_made()
    assert m.peer_stopped() == [Abandon(), Status("stopped")]  # no "reconnecting", no new generation
    assert m.connection_lost() == [] and m.receive({"type": "reconnect"}) == []
    assert m.stop() == [] and m.peer_stopped() == []
    c = Manager(side="f" * 16)  # while a generation is still connecting: it is stopped first
    c.start({"can-dilate": ["ged"]})
    c.receive(please("0" * 16))
    assert c.peer_stopped() == [StopConnecting(1), Status("stopped")]


def test_dial_plan_priorities_and_direct_head_start():
    direct = [("10.0.0.1", 1, 0.0), ("192.168.1.2", 2, 1.0), ("10.0.0.3", 3, 0.0), ("fe.example", 4, -1.0)]
    plan = dial_delays(direct, [("relay", 4001)], direct_possible=True, relay_delay=2.0, priority_step=0.5)
    assert sorted(plan) == [(0.0, "192.168.1.2", 2, False), (0.5, "10.0.0.1", 1, False),
                            (0.5, "10.0.0.3", 3, False), (1.0, "fe.example", 4, False), (2.0, "relay", 4001, True)]
    # nothing direct is possible: the relay is dialled at once
    assert dial_delays([], [("relay", 4001)], direct_possible=False, relay_delay=2.0) == [(0.0, "relay", 4001, True)]


def test_follower_adopts_the_leaders_version():
    f = Manager(side="0" * 16, versions=("ged", "1"))
    f.start({"can-dilate": ["1", "ged"]})
    assert f.version == "ged"
    f.receive({"type": "please", "side": "f" * 16, "use-version": "1"})
    assert f.leader is False and f.version == "1"
    leader = Manager(side="f" * 16, versions=("ged", "1"))
    leader.start({"can-dilate": ["1", "ged"]})
    leader.receive({"type": "please", "side": "0" * 16, "use-version": "1"})
    assert leader.version == "ged"  # the Leader keeps its own choice


def test_upgrade_policy_probes_on_a_bounded_schedule_and_moves_to_quic_only_when_measured_faster():
    clock = 100.0
    p = UpgradePolicy(interval=5.0, probes=3, moves=2, quic_margin=1.25)
    p.connected(clock, relayed=False)  # a direct connection: nothing to look for
    assert p.next_probe() is None and not p.due(clock + 60)
    p.connected(clock, relayed=True)
    assert not p.due(clock + 4.9)
    assert [p.due(clock + t) for t in (5.0, 5.1, 10.0, 15.0, 20.0, 99.0)] == [True, False, True, True, False, False]
    assert p.next_probe() is None  # three looks per relayed connection, then the relay stays
    p.connected(clock, relayed=True)
    # QUIC: only a measured rate at least 1.25 x the relay's replaces it; no measurement keeps the relay
    assert not p.better(quic=True)
    assert not p.better(quic=True, candidate_rate=8e6, current_rate=170e6)
    assert not p.better(quic=True, candidate_rate=12e6, current_rate=10e6)
    assert not p.better(quic=True, candidate_rate=50e6, current_rate=None)
    assert p.moved == 0 and p.next_probe() == clock + 5.0
    assert p.better(quic=True, candidate_rate=12.5e6, current_rate=10e6)
    assert p.moved == 1 and p.next_probe() is None  # the move ends this connection's looks
    p.connected(clock + 30, relayed=True)  # the new generation landed on the relay again
    assert p.due(clock + 35.0)
    assert p.better(quic=False)  # direct TCP replaces the relay without a measurement
    p.connected(clock + 60, relayed=True)  # moves are bounded: no more looking
    assert p.next_probe() is None and not p.better(quic=False)
    p.lost()
    assert not p.due(clock + 1000)
