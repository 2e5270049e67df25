"""Our own transit failure and the peer's error can land in the same loop turn: ours is reported and the
peer's is retrieved, never logged as 'Task exception was never retrieved' after the error line."""

import asyncio
import gc
import json

import pytest

from burrow.client.apps.transfer import connect_unless_peer_gives_up
from burrow.client.errors import TransitError


class PeerThatGivesUpWhenWeDo:
    """The wormhole side: its error arrives the moment our transit gives up (event set just before)."""

    def __init__(self, gave_up: asyncio.Event):
        self.gave_up, self.sent = gave_up, []

    async def get_message(self) -> bytes:
        await self.gave_up.wait()
        return json.dumps({"error": "the receiver found no transit path (tried nothing)"}).encode()

    def send_message(self, data: bytes) -> None:
        self.sent.append(json.loads(data))


class TransitThatFails:
    role = "sender"

    def __init__(self, gave_up: asyncio.Event):
        self.gave_up = gave_up

    async def connect(self):
        await asyncio.sleep(0)
        self.gave_up.set()  # wakes the peer's reader before our failure wakes the waiter
        raise TransitError("no transit path works: tried relay 127.0.0.1:9 (connection refused)")


def test_both_failures_in_one_turn_report_ours_and_lose_nothing():
    lost = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: lost.append(ctx.get("message")))
        gave_up = asyncio.Event()
        w = PeerThatGivesUpWhenWeDo(gave_up)
        with pytest.raises(TransitError, match="connection refused"):
            await connect_unless_peer_gives_up(w, TransitThatFails(gave_up))
        assert w.sent and "found no transit path" in w.sent[0]["error"]  # we told the peer
        gc.collect()  # a task whose exception nobody read reports it when collected

    asyncio.run(main())
    gc.collect()
    assert lost == []
