"""The mailbox's Lua script on a real redis-server: ops batched in one call do not see each other's state."""

import json

import redis

from burrow.mailbox_server.redis_lua import SCRIPT, app_prefix


def op(name, side, now, opid, touched, *args, max_touched=1):
    """One op as redis_batch.py packs it (no limits but mailboxes per connection)."""
    return [name, side, now, "r0", opid, "0", 0, 0, 0, 0, 0, 0, max_touched, len(touched), *touched, *args]


def test_each_op_of_a_batch_starts_from_its_own_state(redis_server):
    redis_server.cli("FLUSHALL")
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    batch = [
        op("open", "a", "1.5", "o1", [], "m1"),  # reaches m1
        op("close", "a", "2.5", "o2", ["m1"], "m1", "happy", "1"),  # last side: deletes m1 (usage, gone)
        op("open", "b", "3.5", "o3", [], "m2"),  # another connection: none of the above is its own
    ]
    opened, closed, other = client.eval(SCRIPT, 1, app_prefix("app"), json.dumps(batch))
    assert opened[:5] == ["", "", 0, "m1", ""]
    assert closed[0] == "" and json.loads(closed[6]) == ["m1"] and json.loads(closed[5])[0]["k"] == "mailbox"
    assert other[:7] == ["", "", 0, "m2", "", "", ""]  # no refusal from o1's reached mailbox, no usage of o2
    client.close()
