"""What selected turns show of their tree: cluster keyword labels and summary-node texts,
cached in the session state so a long session does not recompute them on every query."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from dhrag_core.algorithm.clustering import keyword_labels
from dhrag_core.algorithm.summaries import Summariser
from dhrag_core.history.session import SessionState
from dhrag_core.records import Turn

__all__ = ["cluster_labels", "summary_text"]

_SUMMARY_CACHE = 512


def summary_text(s: SessionState, summariser: Summariser, turn: Turn) -> str:
    """The text of the summary node holding ``turn``, cached while its members stand
    (a merged turn gets a new index, so an edited member is a new key)."""
    _, members = s.tree.summary_of(turn.turn_id)
    key = tuple((m, s.turns[m].index) for m in members)
    text = s.summaries.get(key)
    if text is None:
        if len(s.summaries) >= _SUMMARY_CACHE:
            s.summaries.clear()
        text = s.summaries[key] = summariser.summarise([s.turns[m] for m in members])
    return text


def cluster_labels(s: SessionState, cluster_ids: AbstractSet[int],
                   sample: int = 20) -> dict[int, str]:
    """Keyword labels of the given clusters, contrasted with up to 4 other clusters.

    Labels are cached per cluster and recomputed once it has grown or shrunk by a fifth.
    """
    tree = s.tree
    out: dict[int, str] = {}
    stale: set[int] = set()
    for cid in cluster_ids:
        size = len(tree.cluster_members(cid))
        cached = s.labels.get(cid)
        if cached is not None and abs(cached[0] - size) <= max(2, size // 5):
            out[cid] = cached[1]
        elif size:
            stale.add(cid)
    if stale:
        others = [c for c in tree.cluster_ids() if c not in stale][:4]
        groups: dict[int, list[str]] = {}
        for cid in [*stale, *others]:
            members = tree.latest_members(cid, sample)
            groups[cid] = [f"{s.turns[m].query} {s.turns[m].response}" for m in members]
        for cid, label in keyword_labels(groups, only=stale).items():
            s.labels[cid] = (len(tree.cluster_members(cid)), label)
            out[cid] = label
    return out
