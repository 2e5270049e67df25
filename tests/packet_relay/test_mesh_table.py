"""The mesh forwarding table, sans-IO: who holds a key, newest connection wins, links that break."""

from __future__ import annotations

from burrow.packet_relay.mesh_table import ForwardingTable

X, Y = b"x" * 32, b"y" * 32


def table(local: set | None = None) -> tuple[ForwardingTable, set]:
    local = set() if local is None else local
    t = ForwardingTable(local.__contains__)
    return t, local


def test_a_key_announced_by_a_peer_routes_to_that_link_until_gone():
    t, _ = table()
    t.present("B", X)
    assert t.routes == {X: "B"} and not t.shadowed
    t.gone("A", X)            # another link's PeerGone does not remove B's
    assert t.routes == {X: "B"}
    t.gone("B", X)
    assert t.routes == {} and len(t) == 0


def test_the_newest_announcement_wins_and_the_older_takes_over_when_it_leaves():
    t, _ = table()
    t.present("A", X)
    t.present("B", X)         # the client moved to B (its old connection on A still open)
    assert t.routes[X] == "B"
    t.gone("B", X)
    assert t.routes[X] == "A"
    t.present("A", X)         # a new connection on A: newest again
    t.present("B", X)
    t.present("A", X)
    assert t.routes[X] == "A"


def test_initial_lists_rank_below_anything_seen_live_and_the_first_heard_keeps_ties():
    t, _ = table()
    t.present("A", X, initial=True)
    t.present("B", X, initial=True)
    assert t.routes[X] == "A"             # derper: the first forwarder registered stays preferred
    t.present("C", Y)
    t.present("A", Y, initial=True)       # A reconnected and resent its list: C's live arrival is newer
    assert t.routes[Y] == "C"


def test_a_local_client_wins_over_older_announcements_and_loses_to_newer_ones():
    t, local = table()
    t.present("B", X, initial=True)       # B had X when the link came up
    local.add(X)
    t.local_arrived(X)
    assert X not in t.shadowed            # local and newer: served here
    t.present("B", X)                     # X connected to B after that: B has the newer connection
    assert X in t.shadowed and t.routes[X] == "B"
    t.local_arrived(X)                    # and X reconnects here again
    assert X not in t.shadowed
    t.present("C", X, initial=True)       # a list resent on reconnect never takes a key from a local client
    assert X not in t.shadowed


def test_a_local_client_from_before_the_mesh_counts_as_older_than_live_announcements():
    t, local = table({X})
    t.present("B", X, initial=True)
    assert X not in t.shadowed            # tie at rank 0: local first, as derper
    t.present("B", X)
    assert X in t.shadowed


def test_the_last_local_connection_leaving_clears_the_shadow():
    t, local = table()
    local.add(X)
    t.local_arrived(X)
    t.present("B", X)
    assert X in t.shadowed
    local.discard(X)
    t.local_left(X)
    assert X not in t.shadowed and t.routes[X] == "B"
    t.gone("B", X)
    assert X not in t.routes


def test_a_broken_link_forgets_only_its_own_keys():
    t, _ = table()
    t.present("A", X)
    t.present("A", Y)
    t.present("B", Y)
    assert t.keys_via("A") == 2
    assert t.link_lost("A") == 2
    assert t.routes == {Y: "B"} and t.keys_via("A") == 0
    assert t.link_lost("A") == 0
