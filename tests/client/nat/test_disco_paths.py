"""The Disco path selector, driven by a fake clock: punching, pong matching, choice, re-ping, expiry."""

import itertools

from burrow.client.nat.disco_paths import DIRECT, RELAY, PathSelector

A = ("192.0.2.1", 41641)
B = ("198.51.100.7", 5000)
C = ("10.0.0.5", 41641)


def selector(**kw):
    counter = itertools.count()
    return PathSelector(new_txid=lambda: next(counter).to_bytes(12, "big"), **kw)


def answer(sel, pings, now, only=None):
    """The peer answers every ping (to endpoints in `only`, if given) at `now`."""
    return [sel.on_pong(tx, ep, now) for ep, tx in pings if only is None or ep in only]


def test_relay_until_a_pong_confirms_a_path():
    sel = selector()
    assert sel.path(0.0).kind == RELAY
    sel.add_candidates([A, B], 0.0)
    pings = sel.pings_due(0.0)
    assert sorted(ep for ep, _ in pings) == sorted([A, B])
    assert sel.pings_due(0.1) == []  # nothing new before the punch interval
    assert sel.path(0.1).kind == RELAY
    assert answer(sel, pings, 0.05, only=[B]) == [0.05]
    path = sel.path(0.05)
    assert (path.kind, path.endpoint, path.latency) == (DIRECT, B, 0.05)


def test_punching_repeats_pings_then_slows_to_the_reping_interval():
    sel = selector(punch_interval=0.5, punch_for=2.0, reping_interval=60.0)
    sel.add_candidates([A], 0.0)
    sent = [t / 10 for t in range(0, 100) if sel.pings_due(t / 10)]
    assert sent == [0.0, 0.5, 1.0, 1.5, 2.0]  # a punch window of 2 s at 0.5 s, then quiet
    assert sel.next_deadline(10.0) == 62.0
    assert len(sel.pings_due(62.0)) == 1
    assert sel.stats["lost_pings"] == 5


def test_a_pong_stops_punching_that_endpoint_and_it_is_repinged_each_interval():
    sel = selector(punch_interval=0.5, punch_for=10.0, reping_interval=60.0)
    sel.add_candidates([A], 0.0)
    answer(sel, sel.pings_due(0.0), 0.02)
    assert sel.pings_due(0.5) == [] and sel.pings_due(59.0) == []
    pings = sel.pings_due(60.0)
    assert [ep for ep, _ in pings] == [A]
    answer(sel, pings, 60.01)
    assert abs(sel.path(61.0).latency - 0.01) < 1e-9
    assert sel.path(100.0).kind == DIRECT


def test_pongs_must_match_txid_and_source():
    sel = selector()
    sel.add_candidates([A, B], 0.0)
    pings = dict(sel.pings_due(0.0))
    assert sel.on_pong(b"\xff" * 12, A, 0.1) is None           # unknown TxID
    assert sel.on_pong(pings[A], B, 0.1) is None               # A's TxID from B's address
    assert sel.path(0.1).kind == RELAY
    assert sel.on_pong(pings[A], A, 0.1) == 0.1
    assert sel.on_pong(pings[A], A, 0.2) is None               # a duplicate pong counts once
    assert sel.stats["stray_pongs"] == 3


def test_best_path_is_lowest_latency_with_hysteresis():
    sel = selector(switch_margin=0.1, reping_interval=10.0)
    sel.add_candidates([A, B], 0.0)
    pings = dict(sel.pings_due(0.0))
    sel.on_pong(pings[A], A, 0.020)
    assert sel.path(0.03).endpoint == A
    sel.on_pong(pings[B], B, 0.019)                            # 5% faster: not worth a switch
    assert sel.path(0.03).endpoint == A
    pings = dict(sel.pings_due(10.0))
    sel.on_pong(pings[A], A, 10.030)
    sel.on_pong(pings[B], B, 10.010)                           # 3x faster: switch
    assert sel.path(10.05).endpoint == B


def test_path_expires_when_pongs_stop_and_the_lost_reping_restarts_punching():
    sel = selector(reping_interval=60.0, ping_timeout=5.0, punch_interval=0.5, punch_for=10.0)
    sel.add_candidates([A], 0.0)
    answer(sel, sel.pings_due(0.0), 0.01)
    assert len(sel.pings_due(60.0)) == 1                        # the re-ping; the peer has gone
    assert sel.pings_due(64.0) == []
    assert len(sel.pings_due(65.0)) == 1                        # lost at 65 s: retried at the punch pace
    assert sel.punching(65.0)
    assert sel.path(70.0).kind == DIRECT                        # the last pong (0.01) is 70 s old
    assert sel.path(70.02).kind == RELAY                        # past reping + 2 x timeout
    assert sel.stats["lost_pings"] >= 1


def test_a_ping_from_an_unknown_address_becomes_a_candidate():
    sel = selector(punch_for=5.0)
    sel.add_candidates([A], 0.0)
    sel.pings_due(0.0)
    sel.note_ping_from(C, 1.0)                                  # the peer's NAT mapping towards us
    pings = sel.pings_due(1.0)
    assert C in [ep for ep, _ in pings]
    answer(sel, pings, 1.01, only=[C])
    assert sel.path(1.02).endpoint == C


def test_candidates_and_pending_pings_are_bounded():
    sel = selector(max_candidates=2, max_pending=3, ping_timeout=100.0, punch_for=100.0)
    sel.add_candidates([A, B, C], 0.0)
    assert sel.candidates() == [A, B] and sel.stats["dropped_candidates"] == 1
    first = dict(sel.pings_due(0.0))
    for t in (0.5, 1.0, 1.5):
        sel.pings_due(t)
    assert sel.on_pong(first[A], A, 2.0) is None                # pushed out by newer pings
    assert len(sel._by_txid) == 6


def test_a_ping_from_a_known_unconfirmed_candidate_is_answered_by_a_ping_at_once():
    sel = selector(punch_interval=0.5)
    sel.add_candidates([A], 0.0)
    sel.pings_due(0.0)
    assert sel.pings_due(0.1) == []
    sel.note_ping_from(A, 0.1)                                  # A's NAT is open now: no need to wait
    pings = sel.pings_due(0.1)
    assert [ep for ep, _ in pings] == [A]
    answer(sel, pings, 0.11)
    sel.note_ping_from(A, 0.2)                                  # confirmed: the usual schedule
    assert sel.pings_due(0.2) == []
