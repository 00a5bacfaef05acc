"""The ``dhrag`` command's entry point: quiet on Ctrl-C from its first instant.

``cli`` imports NumPy, FAISS and the model code (half a second or more on a loaded machine);
a Ctrl-C meanwhile would print the interpreter's traceback. This module imports nothing
heavy: until ``cli.main`` runs with its own handling, Ctrl-C prints one line and exits 130.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

__all__ = ["main"]


def _interrupted(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write("\ndhrag: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``dhrag`` (``cli.main``) with Ctrl-C quiet while it loads."""
    previous = signal.signal(signal.SIGINT, _interrupted)
    from dhrag_core.app.cli import main as run

    signal.signal(signal.SIGINT, previous)
    return run(argv)
