"""Can a fitted integration matrix W (paper eq. 6) beat the identity? Cross-validated answer.

Replays the benchmark with DH-RAG's defaults, keeps for each evaluated turn the expanded query
vector and its 20 integration candidates (with gold labels), then fits a diagonal ``W`` by
logistic regression on ``[q.d, q * d]`` features (W = a I + diag(w)), 5-fold by conversation,
and compares MRR@10 of the candidates re-ranked by ``q^T W d`` against the identity on the
held-out folds. The result on MTRAG, and why no fitted W is shipped, is in the README
(Results: integration).

    python -m benchmarks.analyses.fit_integration
"""

from __future__ import annotations

import argparse
import logging

import faiss
import numpy as np

from benchmarks.harness.data import load_benchmark
from benchmarks.harness.dhrag_systems import memo_for
from benchmarks.harness.kbcache import kb_vectors
from benchmarks.harness.metrics import reciprocal_rank
from benchmarks.harness.paths import default_cache, default_data
from dhrag_core import DHRAG, FaissKnowledgeBase, MiniLMEmbedder, Settings


def collect(k: int = 20) -> list[tuple[str, np.ndarray, np.ndarray, list[str], set[str]]]:
    """(conversation id, q', candidate matrix, candidate ids, gold ids) per evaluated turn."""
    bench = load_benchmark(default_cache() / "benchmarks" / "mtrag")
    emb = memo_for(MiniLMEmbedder())
    vectors = kb_vectors(bench.kb, emb.inner, "all-MiniLM-L6-v2", cache_dir=default_cache(),
                         seed=default_data() / "kb_minilm.npz", show_progress=False)
    kb = FaissKnowledgeBase(bench.kb, emb, vectors=vectors)
    rows = []
    for conv in bench.conversations:
        rag = DHRAG(kb, embedder=emb, settings=Settings())
        for t in conv.turns:
            sel = rag.select("s", t.question, k)
            if t.task is not None and t.task.evaluated:
                cands = [c.passage for c in sel.context]
                rows.append((conv.conversation_id, sel.search_vector,
                             np.stack([p.vector for p in cands]), [p.key for p in cands],
                             set(t.task.relevant)))
            rag.record("s", t.question, t.answer or "", selection=sel)
    return rows


def _features(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``[q.d, q*d]``: W = a * I + diag(w), so the fit starts from (and can stay at) I."""
    return np.concatenate([(d @ q)[:, None] * 10.0, d * q], axis=1)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    logging.basicConfig(level=logging.WARNING)
    import torch
    from sklearn.linear_model import LogisticRegression

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    rows = collect()
    convs = sorted({r[0] for r in rows})
    fold_of = {c: i % 5 for i, c in enumerate(np.random.default_rng(0).permutation(convs))}
    base, fitted = [], []
    for fold in range(5):
        train = [r for r in rows if fold_of[r[0]] != fold]
        test = [r for r in rows if fold_of[r[0]] == fold]
        x = np.concatenate([_features(r[1], r[2]) for r in train])
        y = np.concatenate([[key in r[4] for key in r[3]] for r in train])
        clf = LogisticRegression(C=0.01, max_iter=2000, class_weight="balanced").fit(x, y)
        w = clf.coef_[0]
        for r in test:
            ident = np.argsort(-(r[2] @ r[1]), kind="stable")
            learned = np.argsort(-(_features(r[1], r[2]) @ w), kind="stable")
            base.append(reciprocal_rank([r[3][i] for i in ident], r[4], 10))
            fitted.append(reciprocal_rank([r[3][i] for i in learned], r[4], 10))
    b, f = np.array(base), np.array(fitted)
    from benchmarks.harness.metrics import paired_randomisation_test

    p = paired_randomisation_test(f, b)
    print(f"turns {len(b)}: MRR@10 identity W {b.mean():.4f}, fitted diagonal W {f.mean():.4f} "
          f"(5-fold by conversation), p = {p:.4f}")


if __name__ == "__main__":
    main()
