"""What dhrag writes of a user's documents and conversations is the owner's only (issue 55
item 8): the embedding cache and ``/save`` transcripts, 0600 files in 0700 folders, whatever
the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from dhrag_core import DHRAG, HashingEmbedder
from dhrag_core.app.chat import ChatSession
from dhrag_core.knowledge.ingest import load_kb


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_embedding_cache_and_a_saved_chat_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DHRAG_CACHE", str(tmp_path / "cache"))
    kb_dir = tmp_path / "kb"
    kb_dir.mkdir()
    (kb_dir / "wall.txt").write_text("The Great Wall of China is 21,196 km long. " * 5)
    emb = HashingEmbedder()
    kb = load_kb(kb_dir, emb, min_words=1)
    written = [p for p in (tmp_path / "cache").rglob("*")]
    assert any(p.suffix == ".npy" for p in written), written
    for p in written:
        assert _mode(p) == (0o700 if p.is_dir() else 0o600), (p, oct(_mode(p)))
    session = ChatSession(DHRAG(kb, embedder=emb), "s")
    session.ask("How long is the Great Wall?")
    saved = tmp_path / "chat.md"
    session.save(saved)
    assert _mode(saved) == 0o600 and "Great Wall" in saved.read_text()
    with pytest.raises(FileExistsError, match="exists"):
        session.save(saved)
