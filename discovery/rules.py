"""What the discovery accepts (sans-IO): parse a posted entry, check it alone, then against the stored one.

Skywire's rules (messaging-discovery client `Entry.Validate` / `ValidateIteration`): an entry needs a
version, a signature by its `static` key, and a client or server part; a key's first entry has sequence 0,
and each update has the stored sequence + 1 and a later timestamp. Ours on top: the timestamp (Unix
nanoseconds) must lie within the entry TTL in the past and `max_skew` in the future, so a captured entry
cannot be replayed once its key's entry has expired.

Replies use Skywire's HTTPMessage body, {"message": ..., "code": ...}.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from burrow.messaging.entry import Entry, EntryError


@dataclass(frozen=True)
class Verdict:
    status: int
    message: str
    reason: str  # metric label

    @property
    def accepted(self) -> bool:
        return self.status == 200

    def body(self) -> bytes:
        return json.dumps({"message": self.message, "code": self.status}).encode()


WROTE_NEW = Verdict(200, "wrote a new entry", "new")
WROTE_ITERATION = Verdict(200, "wrote new entry iteration", "iteration")
NOT_FOUND = Verdict(404, "entry of public key is not found", "not_found")


def refused(status: int, message: str, reason: str) -> Verdict:
    return Verdict(status, message, reason)


def parse(body: bytes) -> Entry | Verdict:
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return refused(400, "error bad input: body is not JSON", "bad_json")
    try:
        return Entry.from_obj(obj)
    except EntryError as exc:
        return refused(400, f"error bad input: {exc}", "bad_entry")


def check_alone(entry: Entry, now_ns: int, ttl_s: float, max_skew_s: float) -> Verdict | None:
    """Checks that need no stored state; None when the entry passes them."""
    problem = entry.problem()
    if problem is not None:
        return refused(400, f"entry validation error: {problem}", "invalid")
    if not entry.signature_ok():
        return refused(401, "invalid signature", "bad_signature")
    if entry.timestamp < now_ns - int(ttl_s * 1e9):
        return refused(400, "entry validation error: timestamp is older than the entry lifetime", "stale_time")
    if entry.timestamp > now_ns + int(max_skew_s * 1e9):
        return refused(400, "entry validation error: timestamp is in the future", "future_time")
    return None


def check_iteration(stored: Entry | None, entry: Entry) -> Verdict:
    """The verdict for `entry` given the live entry of its key (None when there is none)."""
    if stored is None:
        if entry.sequence != 0:
            return refused(409, "entry validation error: new entry has non-zero sequence", "sequence")
        return WROTE_NEW
    if entry.sequence != stored.sequence + 1:
        return refused(409, "entry validation error: sequence field of new entry is not sequence of old "
                            f"entry + 1 (stored {stored.sequence})", "sequence")
    if entry.timestamp <= stored.timestamp:
        return refused(409, "entry validation error: previous entry timestamp is not set before current entry "
                            "timestamp", "timestamp")
    return WROTE_ITERATION
