"""The scripted demo conversation and its small shipped knowledge base (real Wikipedia text)."""

from __future__ import annotations

import hashlib
import json
from importlib import resources

import numpy as np

from dhrag_core.embedding import Embedder, LocalModelEmbedder, MiniLMEmbedder, bundled_model_path
from dhrag_core.knowledge.base import FaissKnowledgeBase
from dhrag_core.numpy_minilm import NumpyMiniLMEmbedder
from dhrag_core.records import Passage

__all__ = ["DEMO_TURNS", "load_demo_kb"]

#: Topic switches, a return to an earlier topic and elliptical follow-ups.
DEMO_TURNS: tuple[str, ...] = (
    "What is the Great Wall of China built out of?",
    "How long is it?",
    "Where do guinea pigs sleep in the wild?",
    "Can I keep one as a pet?",
    "Who was the wall built to keep out?",
    "When did the Berlin Wall come down?",
    "How many people died trying to cross it?",
    "Why are guinea pigs called pigs?",
)


def load_demo_kb(embedder: Embedder) -> FaissKnowledgeBase:
    """The demo passages (see ``dhrag_core/data/demo_kb.jsonl`` for sources) in FAISS.

    The shipped MiniLM vectors are used when the embedder is all-MiniLM-L6-v2 from the
    bundled weights (``NumpyMiniLMEmbedder``, the default, or ``MiniLMEmbedder``) and the
    texts match them; any other embedder encodes the passages itself (a few seconds).
    """
    data = resources.files("dhrag_core") / "data"
    text = (data / "demo_kb.jsonl").read_text("utf-8")
    # split on newlines only: str.splitlines would also cut at U+2028 inside JSON strings
    rows = [json.loads(line) for line in text.split("\n") if line.strip()]
    passages = [Passage(text=r["text"], id=r["id"], title=r["title"],
                        metadata={"source": r["source"]}) for r in rows]
    vectors = None
    with (data / "demo_kb_minilm.npz").open("rb") as f:
        npz = np.load(f)
        digest = hashlib.sha1("\n".join(r["text"] for r in rows).encode()).hexdigest()
        if _bundled_minilm(embedder) and str(npz["text_sha1"]) == digest:
            vectors = npz["E"].astype(np.float32)
    return FaissKnowledgeBase(passages, embedder, vectors=vectors)


def _bundled_minilm(embedder: Embedder) -> bool:
    """Whether the embedder runs all-MiniLM-L6-v2 from the bundled weights."""
    if not isinstance(embedder, (NumpyMiniLMEmbedder, MiniLMEmbedder)):
        return False
    local: LocalModelEmbedder = embedder
    try:
        return local.model_path.resolve() == bundled_model_path().resolve()
    except RuntimeError:  # weights not installed: encoding will say so
        return False
