"""Shared checks of the reliability tests."""

from __future__ import annotations

import numpy as np

from dhrag_core import HistoryDatabase
from dhrag_core.algorithm.hierarchy import SessionTree


def check_tree(db: HistoryDatabase, sid: str) -> SessionTree:
    """Every stored turn is in exactly one cluster, summary node and chain, as stored."""
    s = db._session(sid)
    with s.lock:
        tree = s.tree
        stored = {t.turn_id: t for t in s.turns.values()}
        assert set(tree.vectors) == set(stored)
        seen: dict[str, int] = {}
        for cid, c in tree.clusters.clusters.items():
            assert c.members, f"empty cluster {cid}"
            for m in c.members:
                assert m not in seen, f"turn {m} in clusters {seen[m]} and {cid}"
                seen[m] = cid
            total = np.sum([tree.vectors[m].astype(np.float64) for m in c.members], axis=0)
            np.testing.assert_allclose(c.total, total, atol=1e-4)
        assert set(seen) == set(stored)
        in_nodes: dict[str, str] = {}
        nodes = tree.summary_nodes(list(tree.clusters.clusters))
        for node in nodes:
            assert node.members
            for m in node.members:
                assert m not in in_nodes, f"turn {m} under two summary nodes"
                in_nodes[m] = node.key
                assert seen[m] == node.cluster_id
                assert tree.chains.of[m] == node.chain_id
        assert set(in_nodes) == set(stored)
        in_chains: set[str] = set()
        for ch_id, ch in tree.chains.chains.items():
            assert ch.members and not in_chains & set(ch.members)
            in_chains |= set(ch.members)
            assert ch.last_index == max(stored[m].index for m in ch.members), ch_id
        assert in_chains == set(stored)
        for tid, t in stored.items():
            assert t.cluster_id == seen[tid], "stored cluster id differs from the tree's"
            assert t.chain_id == tree.chains.of[tid], "stored chain id differs from the tree's"
        return tree
