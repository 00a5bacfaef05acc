"""Embedders: the hashing one for tests, the real offline MiniLM default."""

from __future__ import annotations

import numpy as np
import pytest

from dhrag_core import Embedder, HashingEmbedder, MiniLMEmbedder


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
    assert isinstance(MiniLMEmbedder(), Embedder)


@pytest.mark.parametrize("bad", ["one string", [1, 2], [None]])
def test_encode_rejects_non_text(embedder: HashingEmbedder, bad: object) -> None:
    with pytest.raises(TypeError, match="texts"):
        embedder.encode(bad)  # type: ignore[arg-type]


def test_minilm_reports_missing_weights_clearly() -> None:
    e = MiniLMEmbedder(model_path="/nonexistent/model")
    with pytest.raises(RuntimeError, match="weights are missing"):
        e.encode(["hello"])


@pytest.mark.model
def test_minilm_gives_real_semantic_vectors() -> None:
    e = MiniLMEmbedder()
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
    from dhrag_core import NumpyMiniLMEmbedder

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
    from dhrag_core import NumpyMiniLMEmbedder

    with pytest.raises(TypeError, match="texts"):
        NumpyMiniLMEmbedder().encode(bad)  # type: ignore[arg-type]


def test_numpy_minilm_reports_missing_weights_and_bad_options() -> None:
    from dhrag_core import NumpyMiniLMEmbedder

    with pytest.raises(RuntimeError, match="weights are missing"):
        NumpyMiniLMEmbedder(model_path="/nonexistent/model").encode(["hello"])
    with pytest.raises(ValueError, match="batch_size"):
        NumpyMiniLMEmbedder(batch_size=0)


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
