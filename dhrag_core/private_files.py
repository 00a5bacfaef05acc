"""Files only their owner may read: what dhrag writes of a user's documents and conversations
(the embedding cache, ``/save`` transcripts, calibrations) is created 0600 in 0700 folders,
whatever the umask, and replaced atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["create_private", "private_folder", "write_private"]


def private_folder(folder: Path) -> Path:
    """``folder`` created owner-only if it did not exist, and so are the parents created for
    it (``Path.mkdir(parents=True)`` would give those the umask's mode)."""
    missing = []
    at = folder
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    for new in reversed(missing):
        new.mkdir(mode=0o700, exist_ok=True)
    return folder


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically, the file 0600 in an owner-only folder."""
    private_folder(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def create_private(path: Path, text: str) -> None:
    """Write ``text`` to a new file ``path`` (0600; ``FileExistsError`` if it exists)."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
