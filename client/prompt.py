"""Questions on the terminal that Ctrl-C interrupts at once.

`input()` in a worker thread cannot be interrupted: Ctrl-C cancels the waiting task, but the program
cannot exit until the thread's `input()` returns (someone presses Enter). Here the event loop reads
stdin itself, so cancelling the task ends the question.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading


async def read_line(prompt: str) -> str | None:
    """Write `prompt` to stderr and read one line from stdin; None at end of input."""
    sys.stderr.write(prompt)
    sys.stderr.flush()
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()
    got: asyncio.Future[str | None] = loop.create_future()
    buf = bytearray()

    def readable() -> None:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        buf.extend(chunk)
        if (not chunk or b"\n" in buf) and not got.done():
            got.set_result(buf.decode(errors="replace").partition("\n")[0] if buf else None)

    try:
        loop.add_reader(fd, readable)
    except (PermissionError, ValueError, NotImplementedError):  # a regular file: reading never blocks
        line = sys.stdin.readline()
        return line.rstrip("\n") if line else None
    try:
        return await got
    finally:
        loop.remove_reader(fd)


async def input_line(prompt: str) -> str:
    """`input(prompt)` (with readline's line editing and completion) that Ctrl-C does not wait for.

    It runs in a daemon thread of its own, not the loop's executor: asyncio.run() joins the executor's
    threads on exit, which would keep the program alive until someone pressed Enter.
    """
    loop = asyncio.get_running_loop()
    got: asyncio.Future[str] = loop.create_future()

    def settle(result: str | None, error: BaseException | None) -> None:
        if got.done():
            return
        if error is not None:
            got.set_exception(error)
        else:
            got.set_result(result or "")

    def run() -> None:
        try:
            line = input(prompt)
        except BaseException as e:  # noqa: BLE001 - EOFError and friends go to the waiting task
            loop.call_soon_threadsafe(settle, None, e)
        else:
            loop.call_soon_threadsafe(settle, line, None)

    threading.Thread(target=run, name="burrow-input", daemon=True).start()
    return await got


async def ask_yes(prompt: str) -> bool:
    """True only for an explicit y/yes; end of input counts as no."""
    answer = await read_line(prompt)
    return answer is not None and answer.strip().lower() in ("y", "yes")
