"""int8-coded vectors (``dhrag_core.compact``) and what keeps them: turns, indexes, rows."""

from __future__ import annotations

import pickle
import threading
from dataclasses import replace

import numpy as np
import pytest

from dhrag_core import compact
from dhrag_core.index import RowBuffer, VectorIndex
from dhrag_core.records import Turn


def _units(n: int, d: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    out: np.ndarray = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def test_round_trip_error_is_within_half_a_step_and_a_rounded_vector_is_a_fixed_point() -> None:
    for scale in (1e-20, 1e-3, 1.0, 7.3, 1e6, 1e30):
        x = _units(2000, 64, 1) * scale
        codes, scales = compact.encode(x)
        y = compact.decode(codes, scales)
        bound = np.abs(x).max(axis=1) / 254 * 1.0001  # half a step of 2/255 of the scale
        assert (np.abs(y - x).max(axis=1) <= bound).all()
        again, again_scales = compact.encode(y)
        assert np.array_equal(again, codes) and np.array_equal(again_scales, scales)
        assert np.array_equal(compact.rounded(y), y)


def test_decode_is_faiss_decode_times_the_scale() -> None:
    x = _units(50, 32, 2) * 3.0
    codes, scales = compact.encode(x)
    faiss_rows = compact._quantizer(32).decode(codes) * scales[:, None]
    np.testing.assert_allclose(compact.decode(codes, scales), faiss_rows, rtol=1e-6, atol=1e-7)


def test_a_vector_and_a_zero_vector_and_bad_values() -> None:
    codes, scale = compact.encode(np.zeros(8))
    assert codes.shape == (8,) and scale.shape == (1,) and scale[0] == 1.0
    assert not compact.decode(codes, scale).any()
    v = np.array([0.5, -1.0, 0.25, 0.0], np.float32)
    assert compact.rounded(v)[1] == -1.0 and compact.rounded(v).shape == (4,)
    for bad in (np.inf, np.nan):
        with pytest.raises(ValueError, match="finite"):
            compact.encode(np.array([1.0, bad]))
    with pytest.raises(ValueError, match="finite"):
        compact.encode(np.array([3.4e38, 1.0], np.float32))  # no float32 scale holds it


def test_scan_equals_the_decoded_products_and_is_the_same_wherever_a_row_sits() -> None:
    x = _units(1000, 48, 3)
    q = _units(1, 48, 4)[0]
    codes, scales = compact.encode(x)
    got = compact.inner_products(codes, scales, q)
    np.testing.assert_allclose(got, compact.decode(codes, scales) @ q, atol=1e-5)
    assert np.abs(got - x @ q).max() < 0.02
    assert np.array_equal(compact.inner_products(codes[300:333], scales[300:333], q),
                          got[300:333])
    assert compact.inner_products(codes[:0], scales[:0], q).shape == (0,)
    with pytest.raises(ValueError, match="shape"):
        compact.inner_products(codes, scales, q[:5])


def test_scans_from_two_threads_do_not_mix_their_queries() -> None:
    # a dimension no other test scans: the scanners counted below are this test's
    x = _units(3000, 67, 5)
    codes, scales = compact.encode(x)
    queries = _units(2, 67, 6)
    want = [compact.inner_products(codes, scales, q) for q in queries]
    errors: list[int] = []

    def work(i: int) -> None:
        for _ in range(40):
            if not np.array_equal(compact.inner_products(codes, scales, queries[i]), want[i]):
                errors.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(compact._idle_scanners[67]) <= 3, "at most one scanner per call at once"


def test_scans_reuse_their_scanners_instead_of_making_one_per_call() -> None:
    """FAISS's binding cannot free a scanner: one made per call leaked about 1.6 KB a scan
    (several scans a turn), so a long-running worker grew without bound."""
    codes, scales = compact.encode(_units(100, 53, 8))  # a dimension no other test scans
    query = _units(1, 53, 9)[0]
    first = compact.inner_products(codes, scales, query)
    made = len(compact._idle_scanners[53])
    for _ in range(500):
        assert np.array_equal(compact.inner_products(codes, scales, query), first)
    assert len(compact._idle_scanners[53]) == made == 1


def _turn(**kw: object) -> Turn:
    rng = np.random.default_rng(7)
    base: dict[str, object] = dict(
        session_id="s", turn_id="t", index=0, query="q", passages=(), response="r",
        timestamp=1.0, query_vector=rng.standard_normal(16),
        response_vector=rng.standard_normal(16), passage_vectors=rng.standard_normal((3, 16)),
    )
    base.update(kw)
    return Turn(**base)  # type: ignore[arg-type]


def test_a_turn_keeps_one_buffer_and_decodes_its_vectors() -> None:
    rng = np.random.default_rng(7)
    q, r, p = rng.standard_normal(16), rng.standard_normal(16), rng.standard_normal((3, 16))
    t = _turn()
    assert isinstance(t.vectors, bytes) and len(t.vectors) == 8 + 5 * (16 + 4)
    for got, want in ((t.query_vector, q), (t.response_vector, r), (t.passage_vectors, p)):
        assert got is not None and got.dtype == np.float32 and got.shape == np.shape(want)
        np.testing.assert_allclose(got, want, atol=np.abs(want).max() / 250)
    dq, dr, dp = t.decoded()
    assert np.array_equal(dq, t.query_vector) and np.array_equal(dp, t.passage_vectors)
    assert dr is not None and np.array_equal(dr, t.response_vector)
    codes, scale = t.query_codes
    assert np.array_equal(compact.decode(codes, np.float32(scale)), t.query_vector)
    none = _turn(response_vector=None, passage_vectors=np.zeros((0, 16)))
    assert none.response_vector is None and none.passage_vectors.shape == (0, 16)
    with pytest.raises(ValueError, match="response_vector"):
        _turn(response_vector=np.ones(3))
    with pytest.raises(TypeError, match="query_vector"):
        Turn(session_id="s", turn_id="t", index=0, query="q", passages=(), response="",
             timestamp=0.0)


def test_replace_keeps_or_changes_a_turns_vectors_and_a_turn_pickles() -> None:
    t = _turn()
    moved = replace(t, cluster_id=4, chain_id=2)
    assert moved.vectors is t.vectors and (moved.cluster_id, moved.chain_id) == (4, 2)
    new = replace(t, query_vector=np.ones(16), response_vector=None)
    assert np.array_equal(new.query_vector, np.ones(16)) and new.response_vector is None
    assert np.array_equal(new.passage_vectors, t.passage_vectors)
    back = pickle.loads(pickle.dumps(t))
    assert back.vectors == t.vectors and back.turn_id == t.turn_id
    with pytest.raises(AttributeError):
        t.vectors = b""  # type: ignore[misc]


def test_a_compact_index_adds_removes_and_reuses_slots() -> None:
    x = _units(40, 24, 8)
    index: VectorIndex[str] = VectorIndex(24, compact=True)
    keys = [f"k{i}" for i in range(40)]
    index.add(keys[:20], x[:20])
    codes, scales = compact.encode(x[20:])
    index.add_codes(keys[20:], codes, scales)
    q = x[7]
    _, sims = index.similarities(q)
    np.testing.assert_allclose(sims, compact.rounded(x) @ q, atol=1e-5)
    assert index.search(q, 1)[0][0] == "k7"
    index.remove(["k7", "k3"])
    assert "k7" not in index and len(index) == 38
    assert index.search(q, 1)[0][0] != "k7"
    index.add(["new"], x[7])
    assert index.slot_of("new") in (3, 7) and index.search(q, 1)[0][0] == "new"
    with pytest.raises(ValueError, match="compact"):
        VectorIndex(24).add_codes(["a"], codes[:1], scales[:1])
    # rows by key, decoded in one go: what a turn's own codes decode to, wherever they sit
    picked = ["k30", "new", "k0"]
    np.testing.assert_array_equal(
        index.rows(picked), compact.rounded(np.stack([x[30], x[7], x[0]])))
    with pytest.raises(KeyError):
        index.rows(["k7"])
    plain: VectorIndex[str] = VectorIndex(24)
    plain.add(keys[:3], x[:3])
    np.testing.assert_array_equal(plain.rows(["k2", "k0"]), x[[2, 0]])


def test_row_buffer_keeps_rounded_rows_and_scans_them() -> None:
    rows = compact.rounded(_units(30, 16, 9))
    buf = RowBuffer(rows[:10])
    for i in range(10, 30):
        buf.insert(i, rows[i])
    buf.delete(0)
    assert np.array_equal(buf.view(), rows[1:]) and np.array_equal(buf.row(4), rows[5])
    np.testing.assert_allclose(buf.products(rows[0]), rows[1:] @ rows[0], atol=1e-5)
