"""Ctrl-C while torch imports or a model loads: exit at once, quietly.

A KeyboardInterrupt raised while that code runs inside C++ (pybind11) cannot always unwind:
the process then aborts with ``terminate called after throwing ...`` instead of exiting. Nothing
is written while the model loads, so the command leaves without unwinding.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["exit_on_interrupt"]


@contextmanager
def exit_on_interrupt(prefix: str) -> Iterator[None]:
    """Inside the block, SIGINT flushes stdout and stderr, writes ``prefix: interrupted`` to
    stderr and exits with status 130 (outside the main thread, where no handler can be set,
    it changes nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave(signum: int, frame: FrameType | None) -> None:
        for stream in (sys.stdout, sys.stderr):  # os._exit drops what they still buffer
            with contextlib.suppress(Exception):  # a reentrant or closed stream: leave anyway
                stream.flush()
        os.write(2, f"{prefix}: interrupted\n".encode())
        os._exit(130)

    previous = signal.signal(signal.SIGINT, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
