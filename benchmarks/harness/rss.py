"""This process's resident memory, read without importing anything heavy: a benchmark that
reports a peak must not raise it with its own imports (scikit-learn alone is about 90 MiB)."""

from __future__ import annotations

import resource
import sys

__all__ = ["current_rss_mib", "peak_rss_mib"]


def _status_mib(field: str) -> float | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        pass
    return None


def current_rss_mib() -> float | None:
    """Resident memory of this process now (Linux ``/proc``), or None elsewhere."""
    return _status_mib("VmRSS")


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far: ``VmHWM`` on Linux (it starts again at
    exec, so a child's peak is its own), else ``ru_maxrss``."""
    peak = _status_mib("VmHWM")
    if peak is not None:
        return peak
    raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # pragma: no cover
    return float(raw) / (2**20 if sys.platform == "darwin" else 1024)  # pragma: no cover
