"""Where the benchmark data and caches live: shared by the harness and the analyses."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["REPO_ROOT", "SEED_FILE", "default_cache", "default_data"]

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED_FILE = "kb_minilm.npz"
"""MiniLM vectors of the MTRAG knowledge base shipped with the data (seeds the cache)."""


def default_data() -> Path:
    """``$DHRAG_DATA``, else ``../shared/data/mtrag`` relative to the repository."""
    return Path(os.environ.get("DHRAG_DATA") or REPO_ROOT / ".." / "shared" / "data" / "mtrag")


def default_cache() -> Path:
    """``$DHRAG_CACHE``, else ``~/.cache/dhrag``."""
    return Path(os.environ.get("DHRAG_CACHE") or Path.home() / ".cache" / "dhrag").expanduser()
