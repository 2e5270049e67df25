"""Reading the mailbox script's replies (redis_lua.py): one op's reply to the `Result` the core is given.

Sans-IO: values in, values out, so the Redis store's batch sender (redis_batch.py) and its prune task
(store_redis.py) read replies the same way. The reply layout is in redis_lua.py's docstring.
"""

from __future__ import annotations

import json

from redis.exceptions import NoScriptError

from burrow.common.resp import ReplyError

from . import messages as m
from .ops import Add, Allocate, Claim, Delivery, ListNames, Open, Result
from .state import Mailbox, MailboxSide, Nameplate, NameplateSide, mailbox_usage, nameplate_usage


def reply_result(op, reply: list, app: str = "", msg: dict | None = None, deliver: bool = False) -> Result:
    """`op`'s Result from its script reply. `deliver`: this replica hands its own `add` to the core
    (the lean connection), so an added message `msg` becomes the Result's delivery."""
    app = app or op.app
    err, refusal, fatal, reached, value, usage, gone = [x.decode() if type(x) is bytes else text(x)
                                                        for x in reply[:7]]
    extra = reply[7:]
    res = Result(touched=reached or None)
    if err:
        res.error, res.refusal, res.fatal = getattr(m, err), refusal or None, fatal == "1"
    kind = type(op)
    if kind is ListNames:
        res.value = sorted(text(x) for x in extra)
    elif kind is Allocate or kind is Claim:
        res.value = value
    elif kind is Open and not err:
        res.replay = [json.loads(x) for x in extra]
    elif kind is Add and not err:
        res.value = int(value)  # the new message's number
        if deliver and msg is not None:  # to subscribers here; other replicas get it pushed
            res.delivery = Delivery(app, op.mailbox, res.value, msg)
    if usage:
        res.usage = [usage_event(app, rec, op.now) for rec in json.loads(usage)]
    if gone:
        res.gone = [(app, mailbox) for mailbox in json.loads(gone)]
    return res


def is_noscript(reply) -> bool:
    """Redis restarted without its script cache: the call must be run again once the script is loaded."""
    return isinstance(reply, NoScriptError) or (isinstance(reply, ReplyError) and str(reply).startswith("NOSCRIPT"))


def text(value) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return "" if value is None else str(value)


def usage_event(app: str, rec: dict, now: float) -> tuple[str, dict]:
    """A usage event from the raw sides a script returned, with the single node's mood rules."""
    if rec["k"] == "nameplate":
        sides = {s: NameplateSide(v[0] == "1", float(v.split("|")[1])) for s, v in rec["sides"].items()}
        return "nameplate", {"app_id": app, **nameplate_usage(Nameplate("", "", sides), now, rec["pruned"])}
    mb = Mailbox("", rec["fn"] == "1", now, body_bytes=int(rec["b"]))
    for s, v in rec["sides"].items():
        opened, added, mood = v.split("|", 2)
        mb.sides[s] = MailboxSide(opened == "1", float(added), mood or None)
    return "mailbox", {"app_id": app, **mailbox_usage(mb, now, rec["pruned"], int(rec["n"]))}
