"""How a question relates to the conversation, read from its words alone.

A follow-up that names nothing ("who was it built for?") is about the subject of the latest
turn, however similar its wording is to an older question of another thread ("when was it
built?"): the vectors cannot tell, the words can. A cue that names a subject ("and what about
the Great Pyramid?", "back to the roth ira, ...") makes a question no follow-up.
"""

from __future__ import annotations

from dhrag_core.algorithm.rewriting import is_incomplete
from dhrag_core.algorithm.subjects import cue_topic

__all__ = ["is_follow_up"]


def is_follow_up(query: str) -> bool:
    """Whether the question leans on the latest turn: a referring word or almost no content
    words, and no cue naming a subject of its own."""
    return is_incomplete(query) and cue_topic(query)[0] is None

