"""Query reconstruction (paper eq. 8): a standalone query q'_t from the selected history.

The light rewriter needs no model call. By default it substitutes: the query's referring
expression ("it", "his", "there") becomes the phrase the history turns DH-RAG selected are
about, and an ellipsis ("and in 2019?") is completed from the turn it continues. With
``mode="append"`` it adds the selected turns' salient words instead. For vector retrieval,
``expand_vector`` moves the query vector toward those turns' topic vectors by their weights.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from dhrag_core.algorithm.coreference import complete_name, referring_expression, resolve
from dhrag_core.algorithm.hierarchy import topic_vector
from dhrag_core.algorithm.lexicon import names_in, phrase_key
from dhrag_core.algorithm.subjects import Antecedent, antecedents, cue_topic, is_topic
from dhrag_core.embedding import l2_normalise, token_set, tokens
from dhrag_core.records import SelectedTurn, Turn, Vector

__all__ = ["LightRewriter", "QueryRewriter", "Rewrite", "expand_vector", "is_incomplete"]


@dataclass(frozen=True)
class Rewrite:
    """A reconstructed query: the standalone text, the words that were added and, when a
    referring expression was substituted, that expression and its antecedent."""

    text: str
    added: tuple[str, ...] = ()
    replaced: str | None = None
    antecedent: str | None = None


@runtime_checkable
class QueryRewriter(Protocol):
    """Rewrites the current query into a standalone one, given the selected history.

    An optional coroutine ``arewrite(query, history)`` (doing I/O, such as an LLM call) is
    awaited by ``DHRAG.aselect`` instead of running ``rewrite`` in a worker thread.
    """

    def rewrite(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite: ...


_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'-]*")


def names(text: str) -> set[str]:
    """Tokens written capitalised inside a sentence: the names an "it" usually stands for."""
    return {t for m in _NAME.findall(text.strip()) for t in tokens(m)}


_REFERRING = frozenset(
    {
        "it", "its", "it's", "itself", "they", "them", "their", "theirs", "this", "that",
        "these", "those", "he", "him", "his", "she", "her", "one", "ones", "there", "then",
        "such", "same", "other", "former", "latter",
    }
)


def is_incomplete(query: str, max_content_words: int = 2) -> bool:
    """Whether a query leans on the conversation: a referring word ("it", "they", "that",
    "one"...) or almost no content words ("and the second?", "why?")."""
    words = re.findall(r"[a-z']+", _RECIPROCAL.sub(" ", query.lower()))
    return bool(_REFERRING.intersection(words)) or len(tokens(query)) <= max_content_words


_RECIPROCAL = re.compile(r"\b(?:each\s+other|one\s+another)\b")
""""Tell each other", "help one another": reciprocal, they refer to nothing earlier."""


_CATEGORY = re.compile(
    r"\b(?:the|this|that)\s+(band|group|film|movie|album|song|single|show|series|book|novel|"
    r"company|team|club|game|record|tour|party|organi[sz]ation|church|city|town|school|"
    r"university|magazine|newspaper|festival|war|campaign|project|episode|season|character|"
    r"lawsuit|label|duo|trio|machine|device|product|app|service|policy|plan|account|card)\b"
    r"(?!\s+(?:of\b|(?-i:[A-Z])))",
    re.IGNORECASE,
)
_HAPPENED = re.compile(r"^\W*(?:so\s+|and\s+)?what\s+(?:happened|happens|happen)\b(?!\s+to\b)",
                       re.IGNORECASE)
_FRAGMENT_LEAD = re.compile(r"^\W*(?:(?:and|but|so|ok|okay)\s+)?(?:(?:what|how)\s+about|"
                            r"what\s+of|and|also)\b\s*", re.IGNORECASE)
_DISCOURSE = frozenset({
    "article", "document", "page", "text", "passage", "story", "section", "topic", "subject",
    "thing", "things", "fact", "facts", "aspect", "aspects", "information", "info", "detail",
    "details", "interesting", "anything", "something", "more", "other", "else", "notable",
    "important", "significant",
})
"""Words that point at the conversation itself ("this article", "anything else
interesting"): they do not give a question a subject of its own."""
_YEAR = re.compile(r"\b(?:1[5-9]|20)\d\d\b")

_ANSWER_LENGTH_RATIO = 4
"""About how many times a question's words an answer has: in ``mode="append"`` each answer
word counts this much less than a question word, so a turn's long answer does not outvote its
question, and ``response_weight`` weighs the answer as a whole rather than word by word."""


class LightRewriter:
    """Writes a standalone question from the selected history (no LLM, deterministic).

    ``mode="substitute"`` (default): the first referring expression ("it", "his", "they",
    "that one", "there") is replaced by the best agreeing phrase of the selected turns
    (``dhrag_core.algorithm.coreference``); "what happened" and "the band" get that phrase as their
    complement, a short form of it is written in full; a fragment ("and in 2019?") replaces
    the year of the last question; an incomplete question made of the history's words gets
    "Regarding <phrase>, ..."; a follow-up asking for more ("what else", "any other songs")
    excludes the name the last answer gave. A query that names what it is about is returned
    unchanged.

    ``mode="append"``: the history's salient words that the query lacks are appended in
    parentheses, weighted by the history weight of their turn (the response at
    ``response_weight``); with ``gate``, only incomplete queries (``is_incomplete``).
    """

    def __init__(
        self, max_terms: int = 6, response_weight: float = 0.5, gate: bool = True,
        mode: str = "substitute",
    ) -> None:
        if mode not in ("substitute", "append"):
            raise ValueError(f"mode must be 'substitute' or 'append', got {mode!r}")
        self.max_terms = max_terms
        self.response_weight = response_weight
        self.gate = gate
        self.mode = mode

    def rewrite(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite:
        if self.mode == "append":
            return self._append(query, history)
        if not history:
            return Rewrite(query)
        cands = antecedents(history)
        res = resolve(query, history, cands)
        if res is not None:
            out = _rewrite(query, res.text, res.replaced, res.antecedent)
        else:
            out = self._complete(query, history, cands)
        return _besides(query, out, history)

    def _complete(
        self, query: str, history: Sequence[SelectedTurn], cands: Sequence[Antecedent]
    ) -> Rewrite:
        """Ellipsis: a fragment continues the last question; a subject-less question gets the
        conversation's topic."""
        fragment = _FRAGMENT_LEAD.sub("", query, count=1).strip()
        last = max(history, key=lambda s: s.turn.index).turn.query
        if fragment != query.strip() and len(tokens(fragment)) <= 3:
            done = _replace_slot(last, fragment.rstrip("?.! "))
            if done is not None:
                return Rewrite(done, tuple(w for w in tokens(done) if w not in tokens(query)))
        top = next((a for a in cands if a.kind in ("name", "topic", "cue")), None)
        if top is None:
            return Rewrite(query)
        if top.key & _key_words(query):
            full = complete_name(query, top)  # "Was David a good writer?": David Simon
            return Rewrite(query) if full is None else _rewrite(query, full, None, top)
        m = _HAPPENED.match(query) or _CATEGORY.search(query)
        if m is not None and not _names_new(query, history):
            joiner = " to " if m.re is _HAPPENED else " "
            text = f"{query[:m.end()]}{joiner}{top.text}{query[m.end():]}"
            return _rewrite(query, text, None, top)
        return self._regarding(query, history, cands)

    @staticmethod
    def _regarding(
        query: str, history: Sequence[SelectedTurn], cands: Sequence[Antecedent]
    ) -> Rewrite:
        """An incomplete question ("Who wrote the songs?") whose words all come from the
        selected turns gets the conversation's subject as a lead: "Regarding X, who..."."""
        if (not is_incomplete(query) or names_in(query) or referring_expression(query)
                or is_topic(query)):
            return Rewrite(query)  # self-contained, a new topic, or an unresolved reference
        seen: set[str] = set()
        for s in history:
            seen |= phrase_key(s.turn.query) | phrase_key(s.turn.response)
        own = phrase_key(query) - _DISCOURSE
        usable = [a for a in cands if a.kind != "action"]
        if not usable or own - seen or any(a.key & own for a in usable[:3]):
            return Rewrite(query)  # it brings its own subject, or already names ours
        body = query.strip()
        if body[:1].isupper() and not body.split()[0].isupper():
            body = body[0].lower() + body[1:]
        return _rewrite(query, f"Regarding {usable[0].text}, {body}", None, usable[0])

    def _append(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite:
        if self.gate and not is_incomplete(query):
            return Rewrite(query)  # self-contained: completing it would only add noise
        present = set(tokens(query))
        score: dict[str, float] = defaultdict(float)
        named: set[str] = set()
        for s in history:
            for w in tokens(s.turn.query):
                score[w] += s.weight
            for w in tokens(s.turn.response):
                score[w] += self.response_weight * s.weight / _ANSWER_LENGTH_RATIO
            named |= names(s.turn.query)
        pool = [w for w in score if w not in present and len(w) > 2]
        if any(w in named for w in pool):
            pool = [w for w in pool if w in named]
        ranked = sorted(pool, key=lambda w: (-score[w], w))[: self.max_terms]
        if not ranked:
            return Rewrite(query)
        return Rewrite(f"{query.rstrip()} ({' '.join(ranked)})", tuple(ranked))



def _key_words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z0-9]+", text)}


def _seen(history: Sequence[SelectedTurn]) -> set[str]:
    """The stemmed content words of the selected turns' questions and answers."""
    out: set[str] = set()
    for s in history:
        out |= token_set(s.turn.query) | token_set(s.turn.response)
    return out


def _names_new(query: str, history: Sequence[SelectedTurn]) -> bool:
    """Whether ``query`` names something the selected turns never mention ("What happened at
    Chernobyl?"): its subject is its own, not the conversation's."""
    found = names_in(query)
    seen = _seen(history) if found else set()
    return any(not token_set(n) & seen for n in found)


def _rewrite(query: str, text: str, replaced: str | None, a: Antecedent) -> Rewrite:
    present = set(tokens(query))
    added = tuple(dict.fromkeys(w for w in tokens(text) if w not in present))
    return Rewrite(text, added, replaced, a.text)


_ELSE = re.compile(r"\b(else|other|another|more|additional)\b", re.IGNORECASE)
_EXCEPT = re.compile(r"\b(?:besides|except|other\s+than|aside\s+from|apart\s+from)\b",
                     re.IGNORECASE)
_DEFINITE = frozenset({"the", "this", "that", "these", "those", "his", "her", "its", "their",
                       "my", "your", "our", "each", "every"})
"""Before "other": a definite or reciprocal "other" ("the other pyramids", "his other band",
"each other") is the rest of a set, not an exclusion of what the last answer named."""
_LIKE = re.compile(r"\b(?:like|similar\s+to|such\s+as)\b", re.IGNORECASE)
"""After "other": the question names its own point of comparison ("other towers like it")."""
_MORE_AFTER = frozenset({"any", "some", "what"})
"""Before "more": "any more awards", "what more"; elsewhere "more" is mostly a comparative
("more popular", "how much more")."""


def _asks_for_more(query: str) -> re.Match[str] | None:
    """The word by which ``query`` asks for more of what was answered ("what else", "any other
    songs", "another hit", "any more awards"); ``None`` for a reciprocal ("each other", "one
    another"), a definite ("the other pyramids"), a comparative ("more than", "more popular",
    "taller than any other"), a comparison ("other towers like it") or an exception already
    written ("other than", "or else")."""
    for m in _ELSE.finditer(query):
        word = m.group(1).lower()
        lead = re.findall(r"[\w']+", query[:m.start()].lower())[-2:]
        after = re.match(r"\W*([\w']+)", query[m.end():])
        prev = lead[-1] if lead else ""
        nxt = after.group(1).lower() if after else ""
        if nxt == "than" or "than" in lead:
            continue
        if word == "else":
            ok = prev != "or"
        elif word == "more":
            ok = prev in _MORE_AFTER
        elif word == "another":
            ok = prev != "one" and not _LIKE.search(query, m.end())
        else:
            ok = (prev not in _DEFINITE and not prev.endswith("'s") and nxt != "words"
                  and not _LIKE.search(query, m.end()))
        if ok:
            return m
    return None


_DEMONSTRATIVE = frozenset({"this", "these", "those"})
"""Words by which a question points at the conversation ("during this time"); not "that",
mostly a relative pronoun ("what else do bees eat that is sweet?")."""


def _follows_on(query: str, out: Rewrite, history: Sequence[SelectedTurn],
                asked: re.Match[str]) -> bool:
    """Whether ``query`` continues the selected history: the rewrite tied it to the
    conversation, it refers to it ("he", "this time"), or its content words (the kind asked
    for, as in "other *songs*", aside) are none or some of the history's. A question on a
    subject of its own ("what else do honey bees eat?", "back to X, ...") is no follow-up."""
    if cue_topic(query)[0] is not None:
        return False
    if (out.antecedent is not None or referring_expression(query)
            or _DEMONSTRATIVE.intersection(_key_words(query))):
        return True
    key = phrase_key(query)
    kind: set[str] = set()
    for w in re.findall(r"[\w']+", query[asked.end():]):
        if w.lower() not in key:
            break
        kind.add(w.lower())
    own = token_set(" ".join(key - kind - _DISCOURSE))
    if not own:
        return True
    return bool(own & _seen(history))


def _besides(query: str, out: Rewrite, history: Sequence[SelectedTurn]) -> Rewrite:
    """"What else...?" excludes what the last answer named: "... besides Andrew Farriss?"
    (a name of two words or more, not already in the question), when the question asks for
    more of the same (``_asks_for_more``) and follows on the selected history."""
    asked = _asks_for_more(query)
    if (asked is None or _EXCEPT.search(out.text)
            or not _follows_on(query, out, history, asked)):
        return out
    last = max(history, key=lambda s: s.turn.index).turn
    own = phrase_key(out.text)
    name = next((n for n in names_in(last.response) if " " in n and not phrase_key(n) & own),
                None)
    if name is None:
        return out
    head = out.text.rstrip()
    end = len(head.rstrip("?.! "))
    text = f"{head[:end]} besides {name}{head[end:]}"
    added = tuple(dict.fromkeys([*out.added, *(w for w in tokens(name)
                                                  if w not in tokens(query))]))
    return Rewrite(text, added, out.replaced, out.antecedent)


def _replace_slot(last: str, fragment: str) -> str | None:
    """``last`` with its year replaced by the year of ``fragment`` ("and in 2019?");
    ``None`` when either has none, or when ``fragment`` names something ``last`` does not
    ("what about the 2019 Mustang?": a subject of its own, not only another year)."""
    year = _YEAR.search(fragment)
    old = _YEAR.search(last)
    rest = set(tokens(_YEAR.sub(" ", fragment))) - set(tokens(last)) - {"year"}
    if year and old and not rest:
        return last[:old.start()] + year.group() + last[old.end():]
    return None


def expand_vector(
    query: Vector,
    history: Sequence[SelectedTurn],
    strength: float,
    topic: Callable[[Turn], Vector] = topic_vector,
    share: bool = False,
) -> Vector:
    """``normalise(q + strength * sum_j w_j * topic_j)`` over the selected turns.

    Topic vectors (query + answer + passages) rather than the turns' bare query vectors,
    as answers and passages name what an elliptical query omits. ``share``: each ``w_j`` is
    divided by their sum, so ``strength`` is the history's whole weight and the relevances'
    size (which differs between embedders) sets only how it is shared.
    """
    if not history or strength == 0:
        return query
    total = sum(s.weight for s in history) if share else 1.0
    if not total > 0:
        return query
    v = query.astype(np.float64).copy()
    for s in history:
        v += strength * (s.weight / total) * topic(s.turn)
    out: Vector = l2_normalise(v)[0]
    return out
