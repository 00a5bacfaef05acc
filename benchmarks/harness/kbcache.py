"""On-disk cache of knowledge-base embeddings, keyed by model name and KB content.

Embedding the 36.6k MTRAG passages with MiniLM takes ~19 minutes on a 2-core CPU, so vectors
are cached under ``<cache_dir>/embeddings/`` (outside the repository). A cache can be seeded
from a precomputed ``.npz`` (fields ``ids``, ``text_sha1``, ``E``): rows whose id and text hash
match are taken once a random sample of them, re-encoded with our embedder, agrees.

Example:
    >>> vectors = kb_vectors(passages, MiniLMEmbedder(), "all-MiniLM-L6-v2",
    ...                      cache_dir="~/.cache/dhrag", seed="kb_minilm.npz")  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from dhrag_core import Embedder, Passage
from dhrag_core.records import Vector

__all__ = ["SeedReport", "cache_file", "kb_fingerprint", "kb_vectors", "seed_vectors", "text_sha1"]

log = logging.getLogger(__name__)

MIN_AGREEMENT = 0.99


@dataclass(frozen=True)
class SeedReport:
    """How many rows a seed file supplied, and the worst cosine of the checked sample."""

    matched: int
    sampled: int
    min_cosine: float
    accepted: bool


def text_sha1(text: str) -> str:
    """First 16 hex digits of the SHA-1 of ``text`` (UTF-8): the key the seed file uses."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def kb_fingerprint(passages: Sequence[Passage]) -> str:
    """SHA-1 over the ordered ids and embedded texts of the knowledge base."""
    h = hashlib.sha1()
    for p in passages:
        h.update(p.key.encode("utf-8") + b"\0" + p.text.encode("utf-8") + b"\n")
    return h.hexdigest()


def cache_file(cache_dir: str | os.PathLike[str], model_name: str, fingerprint: str) -> Path:
    """``<cache_dir>/embeddings/<model>/<fingerprint>.npy``."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_name)
    return Path(cache_dir).expanduser() / "embeddings" / slug / f"{fingerprint[:24]}.npy"


def _encode_rows(
    passages: Sequence[Passage], rows: Sequence[int], embedder: Embedder, batch_size: int,
    show_progress: bool,
) -> Vector:
    out = np.zeros((len(rows), embedder.dimension), dtype=np.float32)
    bar = tqdm(total=len(rows), desc="embedding KB", unit="passage", disable=not show_progress)
    with bar:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            out[start : start + len(chunk)] = embedder.encode([passages[i].text for i in chunk])
            bar.update(len(chunk))
    return out


def seed_vectors(
    passages: Sequence[Passage],
    seed: str | os.PathLike[str],
    embedder: Embedder,
    *,
    sample: int = 24,
    rng_seed: int = 0,
) -> tuple[np.ndarray, Vector, SeedReport]:
    """Rows of ``passages`` whose (id, text hash) match the seed file, and their vectors.

    A random sample of the matched rows is re-encoded with ``embedder``; unless every sampled
    cosine exceeds ``MIN_AGREEMENT``, the seed is rejected and nothing is returned.

    Returns:
        ``(row indices, vectors, report)``.
    """
    with np.load(Path(seed).expanduser(), allow_pickle=False) as z:
        ids, hashes, matrix = z["ids"], z["text_sha1"], z["E"]
        if matrix.shape[1] != embedder.dimension:
            raise ValueError(f"seed {seed} has dimension {matrix.shape[1]}, embedder "
                             f"{embedder.dimension}")
        where = {str(i): (j, str(h)) for j, (i, h) in enumerate(zip(ids, hashes, strict=True))}
        pairs = [(r, where[p.key][0]) for r, p in enumerate(passages)
                 if p.key in where and where[p.key][1] == text_sha1(p.text)]
        rows = np.array([r for r, _ in pairs], dtype=np.int64)
        vectors = np.ascontiguousarray(matrix[[j for _, j in pairs]], dtype=np.float32)
    if not len(rows):
        return rows, vectors.reshape(0, embedder.dimension), SeedReport(0, 0, float("nan"), False)
    pick = np.random.default_rng(rng_seed).choice(len(rows), min(sample, len(rows)), replace=False)
    fresh = embedder.encode([passages[int(rows[i])].text for i in pick])
    cosine = float(np.min(np.sum(fresh * vectors[pick], axis=1)))
    report = SeedReport(len(rows), len(pick), cosine, cosine > MIN_AGREEMENT)
    if not report.accepted:
        log.warning("seed %s rejected: sampled cosine %.4f <= %.2f", seed, cosine, MIN_AGREEMENT)
        return rows[:0], vectors[:0], report
    return rows, vectors, report


def kb_vectors(
    passages: Sequence[Passage],
    embedder: Embedder,
    model_name: str,
    *,
    cache_dir: str | os.PathLike[str],
    seed: str | os.PathLike[str] | None = None,
    batch_size: int = 64,
    show_progress: bool = True,
) -> Vector:
    """Unit-length embeddings of ``passages`` (their text, not title), cached on disk.

    Args:
        passages: The knowledge base, in index order.
        embedder: Embeds the rows that neither the cache nor the seed supply.
        model_name: Names the embedder in the cache key; change it when the model changes.
        cache_dir: Cache root (outside the repository).
        seed: Optional ``.npz`` of precomputed vectors (see ``seed_vectors``).
        batch_size: Passages per encoding call.
        show_progress: Show a progress bar while embedding.
    """
    path = cache_file(cache_dir, model_name, kb_fingerprint(passages))
    if path.is_file():
        cached = np.load(path)
        if cached.shape == (len(passages), embedder.dimension):
            log.info("KB vectors from cache %s", path)
            return np.ascontiguousarray(cached, dtype=np.float32)
        log.warning("ignoring cache %s with shape %s", path, cached.shape)
    out = np.zeros((len(passages), embedder.dimension), dtype=np.float32)
    done = np.zeros(len(passages), dtype=bool)
    report = None
    if seed is not None and Path(seed).expanduser().is_file():
        rows, vectors, report = seed_vectors(passages, seed, embedder)
        out[rows], done[rows] = vectors, True
        log.info("seeded %d/%d KB vectors from %s (%s)", len(rows), len(passages), seed, report)
    todo = np.flatnonzero(~done).tolist()
    if todo:
        log.info("embedding %d passages with %s", len(todo), model_name)
        out[todo] = _encode_rows(passages, todo, embedder, batch_size, show_progress)
    _save(path, out, {"model": model_name, "rows": len(passages), "embedded": len(todo),
                      "seed": str(seed) if seed else None,
                      "seed_report": report.__dict__ if report else None})
    return out


def _save(path: Path, matrix: Vector, meta: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.npy")
    np.save(tmp, matrix)
    os.replace(tmp, path)
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    log.info("cached KB vectors at %s", path)
