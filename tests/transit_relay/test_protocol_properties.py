"""Random interleavings of connection events keep the pairing state consistent."""

from hypothesis import given, settings
from hypothesis import strategies as st

from burrow.common.events import validate
from burrow.transit_relay.protocol import Close, Handshake, Limits, Pair, Phase, Record, Relay

TOKENS = [bytes([c]) * 64 for c in b"ab"]
SIDES = [None, b"1" * 16, b"2" * 16]

event = st.one_of(
    st.tuples(st.just("open"), st.sampled_from(["1.1.1.1", "2.2.2.2"])),
    st.tuples(st.just("hello"), st.integers(0, 30), st.sampled_from(TOKENS), st.sampled_from(SIDES)),
    st.tuples(st.just("data"), st.integers(0, 30)),
    st.tuples(st.just("lost"), st.integers(0, 30)),
    st.tuples(st.just("finish"), st.integers(0, 30)),
    st.tuples(st.just("tick"), st.floats(0, 5)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(event, max_size=60), st.integers(0, 3), st.integers(0, 2))
def test_invariants(events, max_pending, max_pairs):
    relay = Relay(Limits(handshake_timeout=3, pending_timeout=4, idle_timeout=2, max_pending=max_pending,
                         max_pairs=max_pairs, max_per_ip=4))
    conns, lines, now = [], {}, 0.0
    pairs_formed = []

    def run(actions):
        for a in actions:
            if isinstance(a, Record):
                validate("transit", "session", a.fields)
                lines.setdefault(a.fields["mood"], 0)
                lines[a.fields["mood"]] += 1
            elif isinstance(a, Pair):
                pairs_formed.append(a.state)
            elif isinstance(a, Close):
                assert a.conn.phase in (Phase.CLOSED, Phase.PAIRED)

    for ev in events:
        now += 0.5
        kind = ev[0]
        if kind == "open":
            c = relay.open(ev[1], "tcp", now)
            if not isinstance(c, str):
                conns.append(c)
        elif conns and kind == "hello":
            run(relay.receive(conns[ev[1] % len(conns)], Handshake(ev[2], ev[3]).encode(), now))
        elif conns and kind == "data":
            run(relay.receive(conns[ev[1] % len(conns)], b"x", now))
        elif conns and kind == "lost":
            run(relay.lost(conns[ev[1] % len(conns)], now))
        elif pairs_formed and kind == "finish":
            run(relay.finish(pairs_formed[ev[1] % len(pairs_formed)], now))
        elif kind == "tick":
            now += ev[1]
            run(relay.tick(now))
        # invariants after every step
        live = [c for c in conns if c.phase is not Phase.CLOSED]
        assert relay.caps.total == len(live)
        assert set(relay.pending) == {c.id for c in conns if c.phase is Phase.PENDING}
        assert set(relay.handshaking) == {c.id for c in conns if c.phase is Phase.HANDSHAKE}
        assert sum(len(v) for v in relay.by_token.values()) == len(relay.pending)
        for waiting in relay.by_token.values():  # nobody waits next to a partner it could pair with
            for i, a in enumerate(waiting):
                assert not any(a.handshake.pairs_with(b.handshake) for b in waiting[i + 1:])
        if max_pending:
            assert len(relay.pending) <= max_pending
        if max_pairs:
            assert len(relay.pairs) <= max_pairs
        for p in relay.pairs:
            assert p.first.pair is p and p.second.pair is p and p.first.handshake.pairs_with(p.second.handshake)
    finished = sum(1 for p in pairs_formed if p.finished)
    assert lines.get("happy", 0) + lines.get("jilted", 0) == finished
    unpaired_closed = sum(1 for c in conns if c.phase is Phase.CLOSED and c.pair is None)
    assert sum(n for m, n in lines.items() if m not in ("happy", "jilted")) == unpaired_closed
