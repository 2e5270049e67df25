"""The mesh forwarding table: which peer relay holds a key this node does not serve; sans-IO.

in:  announcements from mesh links (present / gone / link lost), local arrivals and departures
out: `routes[key]` -> the link to forward to, and `shadowed`, the local keys a newer connection on
     a peer relay has taken over (the registry forwards those too)

Newest connection wins. Every announcement and every local connection gets a rank from one counter;
the highest rank holds the key. The list a peer sends right after WatchConns (its current clients,
of unknown age) ranks 0, below any connection seen since, so a reconnecting mesh link never takes
a key from a client that connected later; among rank-0 holders the first one heard wins, as in
derper (local before remote, then the first peer that announced it). A key that moved from node A
to node B while its old connection on A is still open is therefore served by B everywhere: on A
(B's PeerPresent is newer than A's connection), on B (local, newer than A's list) and on C.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable


class ForwardingTable:
    def __init__(self, is_local: Callable[[Hashable], bool]) -> None:
        self.is_local = is_local
        self.routes: dict[Hashable, object] = {}      # key -> link holding it (hot path reads this)
        self.shadowed: set[Hashable] = set()           # local keys a newer remote connection took over
        self._remote: dict[Hashable, dict[object, int]] = {}  # key -> {link: rank}, first heard first
        self._local_rank: dict[Hashable, int] = {}
        self._keys_of: dict[object, set[Hashable]] = {}
        self._rank = 0

    def __len__(self) -> int:
        return len(self._remote)

    def keys_via(self, link: object) -> int:
        return len(self._keys_of.get(link, ()))

    def _next(self) -> int:
        self._rank += 1
        return self._rank

    # ---- what mesh links report
    def present(self, link: object, key: Hashable, initial: bool = False) -> None:
        """`link`'s relay has a client `key`; `initial` when it came in the list after WatchConns."""
        holders = self._remote.setdefault(key, {})
        rank = 0 if initial else self._next()
        if initial and link in holders:
            rank = holders[link]
        holders.pop(link, None)
        holders[link] = rank
        self._keys_of.setdefault(link, set()).add(key)
        self._settle(key)

    def gone(self, link: object, key: Hashable) -> None:
        holders = self._remote.get(key)
        if holders is None or holders.pop(link, None) is None:
            return
        self._keys_of.get(link, set()).discard(key)
        if not holders:
            del self._remote[key]
        self._settle(key)

    def link_lost(self, link: object) -> int:
        """The link broke: forget every key it announced (it resends them all on reconnect)."""
        keys = self._keys_of.pop(link, set())
        for key in keys:
            holders = self._remote.get(key)
            if holders is not None:
                holders.pop(link, None)
                if not holders:
                    del self._remote[key]
            self._settle(key)
        return len(keys)

    # ---- what the registry reports
    def local_arrived(self, key: Hashable) -> None:
        """A client connected here: it is now the newest connection of its key."""
        self._local_rank[key] = self._next()
        if key in self._remote:
            self._settle(key)

    def local_left(self, key: Hashable) -> None:
        """The last local connection of `key` closed."""
        self._local_rank.pop(key, None)
        if key in self._remote:
            self._settle(key)

    # ---- the decision
    def _settle(self, key: Hashable) -> None:
        holders = self._remote.get(key)
        if not holders:
            self.routes.pop(key, None)
            self.shadowed.discard(key)
            return
        best, best_rank = None, -1
        for link, rank in holders.items():
            if rank > best_rank:      # strict: among equal ranks the first heard keeps the key
                best, best_rank = link, rank
        self.routes[key] = best
        if self.is_local(key) and best_rank > self._local_rank.get(key, 0):
            self.shadowed.add(key)
        else:
            self.shadowed.discard(key)
