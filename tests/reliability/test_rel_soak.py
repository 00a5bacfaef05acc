"""A shortened soak (``benchmarks/perf/soak.py``): memory stays bounded once the session is full.

Asserts structure, not timings: the session holds exactly ``capacity`` turns after the fill,
every derived structure (indexes, tree, clusters, chains) tracks only the stored turns, and
current RSS grows by less than a generous bound after the fill.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.perf.soak import PASSAGES_PER_TURN, _Stream
from dhrag_core import HashingEmbedder, HistoryDatabase, Limits, Passage, Settings

REPO = Path(__file__).resolve().parents[2]


def test_soak_memory_is_bounded(tmp_path: Path) -> None:
    turns, capacity = int(os.environ.get("DHRAG_SOAK_TURNS", "5000")), 200
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.perf.soak", "--turns", str(turns), "--capacity",
         str(capacity), "--every", str(turns // 10), "--json", str(out), "--png", ""],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    samples = result["samples"]
    assert len(samples) == 10 and samples[-1]["turn"] == turns
    for s in samples:
        assert s["size"] == min(s["turn"], capacity)
        assert s["evicted_total"] + s["merged_total"] == s["turn"] - s["size"]
        assert 1 < s["clusters"] <= s["size"] and 1 < s["chains"] <= s["size"]
    # flat within noise (-3..+2 MiB here); a FAISS scanner leaked per scan grew it by 26 MiB
    assert result["rss_growth_after_fill_mib"] < 12, result


def _structures(db: HistoryDatabase, session: str) -> dict[str, int]:
    s = db._sessions[session]
    tree = s.tree
    return {
        "turns": len(s.turns),
        "query slots": s.queries.n_slots,
        "tree vectors": len(tree.vectors),
        "tree index": len(tree.index_of),
        "cluster members": sum(c.size for c in tree.clusters.clusters.values()),
        "cluster of": len(tree.clusters.of),
        "chain members": sum(len(c.members) for c in tree.chains.chains.values()),
        "chain of": len(tree.chains.of),
        "clusters": len(tree.clusters.clusters),
        "chains": len(tree.chains.chains),
    }


def test_derived_structures_track_only_stored_turns() -> None:
    capacity, turns = 100, 1500
    now = [0.0]
    db = HistoryDatabase(embedder=HashingEmbedder(384),
                         settings=Settings(limits=Limits(capacity=capacity)), clock=lambda: now[0])
    stream = _Stream(seed=3, block=500)
    for i in range(turns):
        now[0] = float(i)
        _, qv, pv = stream.next()
        db.select("s", qv)
        db.add("s",
               f"question {i}",
               "",
               passages=[Passage(text=f"p{i}.{j}", vector=pv[j])
                                      for j in range(PASSAGES_PER_TURN)],
               query_vector=qv)
        if i in (capacity, turns // 2, turns - 1):
            st = _structures(db, "s")
            n = st["turns"]
            assert n == min(i + 1, capacity)
            for key in ("tree vectors", "tree index", "cluster members", "cluster of",
                        "chain members", "chain of"):
                assert st[key] == n, (key, st)
            # slots are reused: the index arrays never outgrow the session
            assert st["query slots"] <= capacity + 1, st
            assert st["clusters"] <= n and st["chains"] <= n
    kept = db.turns("s")
    assert len(kept) == capacity
    assert np.all(np.diff([t.index for t in kept]) > 0)
