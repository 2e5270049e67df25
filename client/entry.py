"""The `burrow` command's entry point: the command line of cli.py, started and stopped for less.

Sending a text or a small file is mostly Python starting and stopping, so the cyclic garbage collector
is kept from walking the objects the start-up makes:
- it is off while the modules load (loading makes hundreds of thousands of objects, no garbage, and
  would set off several full collections), then everything loaded is frozen: moved where collections
  never look again, so a later one walks only what the command itself made;
- at exit everything is frozen again, so the interpreter's teardown skips one last walk over every
  object (about 30 ms of a 0.3 s text transfer on the test machine). Files are closed by the code that
  wrote them and the standard streams are flushed by the interpreter, so nothing is left unwritten.
"""

from __future__ import annotations

import gc


def main() -> None:
    gc.disable()
    from .cli import main as run

    gc.freeze()
    gc.enable()
    try:
        run()
    finally:
        gc.freeze()
