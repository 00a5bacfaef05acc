"""Per-stage wall-clock timings of one turn, so users and the benchmark can see where time goes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["StageTimer"]


class StageTimer(dict[str, float]):
    """Seconds per named stage; a stage timed twice accumulates.

    Example:
        >>> timer = StageTimer()
        >>> with timer("history_s"):
        ...     pass
        >>> sorted(timer)
        ['history_s']
    """

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self[stage] = self.get(stage, 0.0) + time.perf_counter() - start
