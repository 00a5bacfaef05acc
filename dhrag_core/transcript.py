"""Selected history turns as a transcript: the one way prompts, traces and adapters show them.

Selection ranks turns best first; a conversation reads oldest first, and a turn recorded
without an answer shows only its question. Keeping those rules here means the LLM rewriter,
the answerer, ``dhrag chat``/``demo`` and both adapters cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from dhrag_core.records import SelectedTurn, Turn

__all__ = ["Role", "clip", "describe_selected", "exchanges", "format_transcript", "in_turn_order"]

Role = Literal["user", "assistant"]


def in_turn_order(history: Iterable[SelectedTurn]) -> list[Turn]:
    """The selected turns, oldest first."""
    return [s.turn for s in sorted(history, key=lambda s: s.turn.index)]


def exchanges(turns: Iterable[Turn]) -> list[tuple[Role, str]]:
    """Each turn as ``("user", query)`` then ``("assistant", response)``, in the given order;
    a blank response is left out."""
    out: list[tuple[Role, str]] = []
    for t in turns:
        out.append(("user", t.query))
        if t.response.strip():
            out.append(("assistant", t.response))
    return out


def clip(text: str, limit: int) -> str:
    """``text`` on one line (white space folded), at most ``limit`` characters: a longer one
    is cut and ends in "…"."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def format_transcript(
    history: Sequence[SelectedTurn], *, user: str = "User", assistant: str = "Assistant",
    max_chars: int | None = None,
) -> str:
    """The selected turns, oldest first, as ``User: ...`` / ``Assistant: ...`` lines (the
    prefixes are ``user`` and ``assistant``); with ``max_chars`` each text is ``clip``-ped."""
    prefix = {"user": user, "assistant": assistant}
    return "\n".join(
        f"{prefix[role]}: {text if max_chars is None else clip(text, max_chars)}"
        for role, text in exchanges(in_turn_order(history))
    )


def describe_selected(
    s: SelectedTurn, *, query_chars: int, response_chars: int | None = None, digits: int = 3
) -> str:
    """One trace line for a selected turn: its number (from 1), its query (and response, with
    ``response_chars``), its weight and the weight's parts, cluster, chain, and the matchers
    that found it."""
    turn = f"turn {s.turn.index + 1} {clip(s.turn.query, query_chars)!r}"
    if response_chars is not None:
        turn += f" -> {clip(s.turn.response, response_chars)!r}"
    return (f"{turn}  weight={s.weight:.{digits}f} (relevance={s.relevance:.{digits}f} "
            f"recency={s.recency:.{digits}f})  cluster {s.cluster_id} [{s.cluster_label}]  "
            f"chain {s.chain_id}  via {'+'.join(s.via)}")
