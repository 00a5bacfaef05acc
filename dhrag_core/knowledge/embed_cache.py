"""The embedding cache of knowledge bases built from files, and the progress said meanwhile.

Vectors are cached outside the repository, in ``$DHRAG_CACHE/kb`` (default
``~/.cache/dhrag/kb``), one file per source document keyed by the SHA-1 of the embedder's
identity and the document's passage texts.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dhrag_core.embedding import Embedder, LocalModelEmbedder, check_finite
from dhrag_core.private_files import write_private
from dhrag_core.records import Passage, Vector
from dhrag_core.validation import one_line

__all__ = [
    "default_cache_dir",
    "embed_by_file",
    "embed_cached",
    "embedder_id",
    "status",
    "warm_up",
]

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """``$DHRAG_CACHE/kb``, else ``~/.cache/dhrag/kb``."""
    root = os.environ.get("DHRAG_CACHE") or Path.home() / ".cache" / "dhrag"
    return Path(root).expanduser() / "kb"


def embedder_id(embedder: Embedder) -> str:
    """What identifies an embedder's vectors: its class, dimension and model (if any)."""
    model: Any = ""
    if isinstance(embedder, LocalModelEmbedder):
        model = embedder.model_path
    else:
        model = getattr(embedder, "model_path", None) or getattr(embedder, "model_name", "")
    cls = type(embedder)
    return f"{cls.__module__}.{cls.__qualname__}:{embedder.dimension}:{model}"


def status(prefix: str, message: str) -> None:
    """One progress line on stderr (``prefix: message``), flushed at once."""
    sys.stderr.write(f"{prefix}: {message}\n")
    sys.stderr.flush()


def warm_up(embedder: Embedder, prefix: str = "dhrag") -> None:
    """Load a model embedder now, saying so on stderr, rather than silently at first use."""
    if isinstance(embedder, LocalModelEmbedder) and not embedder.loaded:
        status(prefix, "loading the embedding model all-MiniLM-L6-v2 (offline, a few "
                       "seconds) ...")
        t0 = time.perf_counter()
        embedder.encode(["warm up"])
        log.info("model loaded in %.1f s", time.perf_counter() - t0)


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="passage", desc="embedding knowledge base", file=sys.stderr)


def _cache_path(texts: Sequence[str], key: str, folder: Path) -> Path:
    digest = hashlib.sha1(key.encode())
    for t in texts:
        digest.update(b"\0" + t.encode("utf-8", "surrogatepass"))
    return folder / f"{digest.hexdigest()}.npy"


def _read_cache(path: Path, expected: tuple[int, int]) -> Vector | None:
    """The vectors cached in ``path``, or None (absent, wrong shape, damaged: logged)."""
    if not path.is_file():
        return None
    check = path.with_suffix(".sha256")
    try:
        shape = _npy_shape(path)
        cached = np.load(path, allow_pickle=False) if shape == expected else None
        if cached is None:
            log.warning("ignoring cache %s: shape %s, expected %s", one_line(path), shape,
                        expected)
        elif not check.is_file() or check.read_text().strip() != _checksum(cached):
            log.warning("ignoring cache %s: its checksum does not match (damaged file)",
                        one_line(path))
        else:
            log.info("knowledge base vectors from cache %s", one_line(path))
            out: Vector = cached.astype(np.float32, copy=False)
            return out
    except (OSError, ValueError, MemoryError) as exc:
        log.warning("ignoring unreadable cache %s: %s", one_line(path), one_line(exc))
    return None


def _write_cache(path: Path, vectors: Vector) -> None:
    try:
        buffer = io.BytesIO()
        np.save(buffer, vectors)
        write_private(path, buffer.getvalue())
        write_private(path.with_suffix(".sha256"), (_checksum(vectors) + "\n").encode())
    except OSError as exc:
        log.warning("could not cache knowledge base vectors in %s: %s", one_line(path.parent),
                    one_line(exc))


def _encode(texts: Sequence[str], embedder: Embedder, show: bool, batch_size: int) -> Vector:
    """``texts`` encoded in batches, with a progress bar when ``show``."""
    if show:
        warm_up(embedder)  # said before the bar, which would otherwise sit at 0 meanwhile
    bar = _progress(len(texts), show)
    chunks = []
    try:
        for start in range(0, len(texts), batch_size):
            chunk = np.asarray(embedder.encode(list(texts[start : start + batch_size])),
                               dtype=np.float32)
            check_finite(embedder, chunk, " of the knowledge base's passages; none cached")
            chunks.append(chunk)
            if bar is not None:
                bar.update(len(chunks[-1]))
    finally:
        if bar is not None:
            bar.close()
    out: Vector = (np.concatenate(chunks) if chunks
                   else np.zeros((0, embedder.dimension))).astype(np.float32)
    return out


def embed_cached(
    texts: list[str],
    embedder: Embedder,
    *,
    cache_dir: str | Path | None = None,
    progress: bool | None = None,
    batch_size: int = 64,
    model_id: str | None = None,
) -> Vector:
    """Embeddings of ``texts``, read from or written to ``<cache_dir>/<sha1>.npy``.

    Args:
        texts: Passage texts.
        embedder: Encodes them on a cache miss.
        cache_dir: Cache folder (default ``default_cache_dir()``).
        progress: Show a tqdm bar (if tqdm is installed); default: when stderr is a terminal.
        batch_size: Passages per encoding call.
        model_id: Overrides ``embedder_id(embedder)`` in the cache key.
    """
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    path = _cache_path(texts, model_id or embedder_id(embedder), folder)
    cached = _read_cache(path, (len(texts), embedder.dimension))
    if cached is not None:
        return cached
    t0 = time.perf_counter()
    show = sys.stderr.isatty() if progress is None else progress
    vectors = _encode(texts, embedder, show, batch_size)
    _write_cache(path, vectors)
    log.info("embedded %d passages in %.1f s; cached in %s", len(texts),
             time.perf_counter() - t0, one_line(path))
    return vectors


def _file_groups(passages: Sequence[Passage], by_source: bool) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of passages from one source file (all, if not
    ``by_source``)."""
    if not by_source:
        return [(0, len(passages))]
    groups: list[tuple[int, int]] = []
    for i, p in enumerate(passages):
        if groups and p.metadata.get("source") == passages[groups[-1][0]].metadata.get("source"):
            groups[-1] = (groups[-1][0], i + 1)
        else:
            groups.append((i, i + 1))
    return groups


def embed_by_file(
    passages: Sequence[Passage], embedder: Embedder, folder: Path, show: bool | None,
    kb: Path,
) -> Vector:
    """Vectors of ``passages``, cached per source file: an added or changed file is the only
    one embedded. The cache files this knowledge base used before and no longer needs (its
    changed or removed files) are deleted."""
    key = embedder_id(embedder)
    texts = [p.text for p in passages]
    groups = _file_groups(passages, by_source=kb.is_dir())
    paths = [_cache_path(texts[a:b], key, folder) for a, b in groups]
    parts: list[Vector | None] = [_read_cache(path, (b - a, embedder.dimension))
                                  for path, (a, b) in zip(paths, groups, strict=True)]
    missing = [i for i, part in enumerate(parts) if part is None]
    if missing:
        todo = [t for i in missing for t in texts[groups[i][0] : groups[i][1]]]
        t0 = time.perf_counter()
        bar = sys.stderr.isatty() if show is None else show
        if show is None and not bar:  # no terminal for a bar: one line instead
            status("dhrag", f"embedding {len(todo)} of {len(texts)} passages ({len(missing)} "
                            "new or changed files; cached for the next start) ...")
        fresh = _encode(todo, embedder, bar, 64)
        at = 0
        for i in missing:
            n = groups[i][1] - groups[i][0]
            parts[i] = fresh[at : at + n]
            _write_cache(paths[i], fresh[at : at + n])
            at += n
        log.info("embedded %d of %d passages (%d of %d files new or changed) in %.1f s",
                 len(todo), len(texts), len(missing), len(groups), time.perf_counter() - t0)
    _prune(folder, key, kb, {p.name for p in paths})
    return np.concatenate([p for p in parts if p is not None]).astype(np.float32, copy=False)


def _prune(folder: Path, key: str, kb: Path, used: set[str]) -> None:
    """Delete the cache files that this knowledge base's manifest lists and it no longer uses
    (another knowledge base holding an identical file then re-embeds it: a cost, not an
    error); record the ones it uses now."""
    ident = hashlib.sha1(f"{key}\0{kb}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
    manifest = folder / f"kb-{ident}.json"
    try:
        before = set(json.loads(manifest.read_text("utf-8")).get("files", []))
    except (OSError, ValueError, AttributeError):
        before = set()
    for name in sorted(before - used):
        if re.fullmatch(r"[0-9a-f]{40}\.npy", name):
            for stale in (folder / name, (folder / name).with_suffix(".sha256")):
                with contextlib.suppress(OSError):
                    stale.unlink()
                    log.info("pruned stale cache file %s", one_line(stale))
    if before != used:
        with contextlib.suppress(OSError):
            write_private(manifest, json.dumps(
                {"kb": str(kb), "model": key, "files": sorted(used)}).encode("utf-8"))


def _npy_shape(path: Path) -> tuple[int, ...]:
    """The array shape a ``.npy`` header claims, read without loading the data (a damaged
    header may claim terabytes)."""
    with path.open("rb") as f:
        version = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, _, _ = read(f)
    return tuple(int(n) for n in shape)


def _checksum(vectors: np.ndarray) -> str:
    """SHA-256 of the vectors' bytes: a damaged cache file of the right shape is not used."""
    return hashlib.sha256(np.ascontiguousarray(vectors, dtype=np.float32).tobytes()).hexdigest()
