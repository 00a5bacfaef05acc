"""What the selected turns are about: their phrases, ranked as antecedents.

A turn's phrases are the names it writes, the whole turn when it only names a topic, the
subject a cue names ("what about X?", "back to X, ..."), a question's subject ("what is X",
"who invented X") or action ("how do I X"). ``antecedents`` ranks them by the weights DH-RAG
gave the turns; ``cue_topic`` reads the subject a question's lead names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from dhrag_core.algorithm.lexicon import (
    ADVERBS,
    AUX,
    BOUNDARY,
    DETERMINERS,
    DO_SUPPORT,
    IMPERATIVE,
    PREPOSITIONS,
    PRONOUNS,
    VERBS,
    WH,
    is_capitalised,
    names_in,
    phrase_key,
    words,
)
from dhrag_core.records import SelectedTurn

__all__ = ["Antecedent", "antecedents", "cue_topic", "is_topic"]

_PAREN = re.compile(r"\s*\([^)]*\)")
_TOPIC_MAX_WORDS = 7


@dataclass(frozen=True)
class Antecedent:
    """A phrase the selected turns are about: ``text`` as written, ``score`` from their weights.

    ``kind`` is ``"name"`` (capitalised), ``"topic"`` (a turn that is only a phrase),
    ``"cue"`` (the subject a cue named: "what about X?"),
    ``"phrase"`` (a question's noun phrase) or ``"action"`` (what a how-to question asks to do).
    """

    text: str
    kind: str
    score: float
    key: frozenset[str]



def _noun_phrase(
    text: str, ws: list[re.Match[str]], start: int, name_ends: bool = True
) -> str | None:
    """The noun phrase starting at word ``start``: a determiner, then words up to a boundary
    (a verb, preposition, pronoun...); "of" joins a second phrase ("the wall of China").
    With ``name_ends``, a lower-case word after a name ends it ("did Terry Bradshaw retire")."""
    j = start
    if j < len(ws) and ws[j].group().lower() in DETERMINERS - {"his", "her", "its", "their"}:
        j += 1
    first = j
    while j < len(ws):
        w = ws[j].group()
        lw = w.lower()
        if lw == "of" and j > first and j + 1 < len(ws):
            rest = _noun_phrase(text, ws, j + 1)
            if rest is None:
                break
            return text[ws[start].start():ws[j + 1].start() + len(rest)]
        if lw in BOUNDARY or lw in DETERMINERS or (j > first and not is_capitalised(w) and (
            (lw.endswith("ed") and len(lw) > 4)
            or (name_ends and is_capitalised(ws[j - 1].group()))
        )) or (j > first and text[ws[j - 1].end():ws[j].start()].strip()):
            break
        j += 1
        if j - first >= 6:
            break
    if j == first:
        return None
    return text[ws[start].start():ws[j - 1].end()]


_SWITCH = re.compile(
    r"^\W*(?:(?:ok(?:ay)?|so|and|but|now|well|hey|also)\W+)*(?:(?:totally|completely|slightly)\s+)?"
    r"(?:unrelated|off[\s-]topic|(?:a\s+)?(?:different|new|another|other)\s+(?:topic|question|"
    r"subject|thing)|switching\s+(?:topics?|subjects?|gears)|changing\s+(?:the\s+)?(?:topic|"
    r"subject)|random\s+question|quick\s+question|on\s+another\s+note|by\s+the\s+way)"
    r"(?:\s+(?:but|now|though))?\s*(?:[,:;.!?]+|\s-+|\s\u2013)\s*",
    re.IGNORECASE,
)
"""A lead that announces a change of subject ("different topic -", "unrelated, but")."""
_CUE = re.compile(
    r"^\W*(?:(?:ok(?:ay)?|so|and|but|now|well|alright)\W+)*"
    r"(?:(?:(?:going|coming|getting|switching)\s+)?back\s+to|(?:what|how)\s+about|what\s+of|"
    r"as\s+for|regarding|now\s+for|and)\s+(?P<topic>[^,:;?!.\u2013]+?)"
    r"\s*(?:[,:;?!.\u2013]|\s-+\s|$)",
    re.IGNORECASE,
)
"""A lead that names the subject of the rest ("back to the roth ira, ...", "what about
Alan Shepard?", "and the pantheon, what's that?")."""
_CUE_MAX_WORDS = 6


def cue_topic(text: str) -> tuple[str | None, str]:
    """The subject a question's lead names ("what about X, ...", "back to X: ..."), if any,
    and the rest of the question, an announced change of subject ("unrelated, but") dropped.
    """
    rest = _SWITCH.sub("", text, count=1)
    m = _CUE.match(rest)
    if m is None:
        return None, rest
    topic = m.group("topic").strip()
    ws = words(topic)
    lower = [w.group().lower() for w in ws]
    if (not ws or len(ws) > _CUE_MAX_WORDS
            or lower[0] in PRONOUNS | WH | AUX | VERBS | PREPOSITIONS
            or not phrase_key(topic) or any(w in WH | AUX for w in lower)):
        return None, rest
    return topic, rest[m.end():]


def _question_phrases(text: str) -> list[tuple[str, str]]:
    """``(phrase, kind)`` of one user turn: the whole turn when it only names a topic, the
    subject a cue names ("back to X, ..."), the subject of "what is X" / "tell me about X"
    / "who invented X", the action of "how do I X", determiner-led noun phrases."""
    topic, text = cue_topic(text)
    if topic is not None:
        return [(topic, "cue"), *_question_phrases(text)] if text.strip() else [(topic, "cue")]
    stripped = text.strip().rstrip("?.!").strip()
    ws = words(stripped)
    if not ws:
        return []
    lower = [w.group().lower() for w in ws]
    out: list[tuple[str, str]] = []
    if ("?" not in text and len(ws) <= _TOPIC_MAX_WORDS and lower[0] not in WH | AUX
            and lower[0] not in IMPERATIVE and not any(w in VERBS for w in lower)):
        out.append((_PAREN.sub("", stripped).strip(), "topic"))
        return out
    i = 0
    while i < len(ws) and lower[i] in IMPERATIVE:
        i += 1
    if i < len(ws) and lower[i] in WH:
        i += 1
        if i < len(ws) and lower[i] in {"much", "many", "long", "far", "often", "old", "big"}:
            i += 1
        while i + 1 < len(ws) and lower[i] in ADVERBS:
            i += 1
    if i + 1 < len(ws) and lower[i] in AUX | {"me", "about", "us"}:
        i += 1
        while i + 1 < len(ws) and lower[i] in ADVERBS:
            i += 1
        if lower[i - 1] == "me" and i < len(ws) and lower[i] == "about":
            i += 1
    if i < len(ws) and lower[i] in {"i", "you", "we"} and i + 1 < len(ws) and (
            lower[0] == "how" or lower[0] in AUX):
        action = stripped[ws[i + 1].start():]
        if action:
            out.append((action, "action"))
    elif 0 < i < len(ws) and i + 1 < len(ws) and lower[0] in {"who", "what", "which"} \
            and lower[i - 1] in WH and _verb_like(lower[i], lower[i + 1]):
        # "who invented the cotton gin", "what causes sickle cell disease": the object
        subject = _noun_phrase(stripped, ws, i + 1)
        if subject is not None:
            out.append((subject, "phrase"))
        i += 1
    elif 0 < i < len(ws):
        subject = _noun_phrase(stripped, ws, i, name_ends=lower[i - 1] in DO_SUPPORT)
        end = stripped.index(subject) + len(subject) if subject is not None else 0
        after = words(stripped[end:])
        runs_on = not after or after[0].group().lower() not in BOUNDARY
        if (subject is not None and i > 0 and lower[i - 1] in DO_SUPPORT and runs_on
                and " " in subject.strip() and subject.split()[-1].islower()):
            subject = subject.rsplit(" ", 1)[0]  # "did the band tour": "tour" is the verb
            if subject.lower() in DETERMINERS:
                subject = None
        if subject is not None:
            out.append((subject, "phrase"))
    for k, w in enumerate(lower):
        if k > i and w in {"the", "a", "an"}:
            np = _noun_phrase(stripped, ws, k)
            if np is not None:
                out.append((np, "object"))
    return out


def _verb_like(word: str, following: str) -> bool:
    """Whether ``word``, right after "who" / "what", is the question's verb: a known verb, a
    past tense, or a present tense followed by its object's determiner."""
    return (word in VERBS or (word.endswith("ed") and len(word) > 4)
            or (word.endswith("s") and not word.endswith("ss") and following in DETERMINERS)
            or (word.endswith("es") and len(word) > 4))


_KIND_WEIGHT = {"topic": 5.0, "cue": 5.0, "name": 1.0, "phrase": 1.0, "action": 1.0, "object": 0.5}
_RESPONSE_WEIGHT = 0.25


@lru_cache(maxsize=4096)
def _turn_phrases(
    query: str, response: str
) -> tuple[tuple[tuple[str, str, frozenset[str]], ...], tuple[frozenset[str], ...]]:
    """A turn's phrases ``(text, kind, key)`` and the keys of the names its response
    mentions; cached, as a session selects the same turns again and again."""
    phrases = _question_phrases(query) + [(n, "name") for n in names_in(query)]
    out = []
    for text, kind in phrases:
        text = _PAREN.sub("", text).strip() if kind != "action" else text
        key = phrase_key(text)
        if key:
            out.append((text, kind, key))
    mentioned = tuple(k for k in map(phrase_key, names_in(response)) if k)
    return tuple(out), mentioned


def antecedents(history: Sequence[SelectedTurn]) -> list[Antecedent]:
    """Phrases of the selected turns, best first.

    A phrase scores the history weight of each turn that mentions it (its query fully, its
    response at a quarter), times a factor of its kind; a short form ("Zappa") adds its score
    to the longest form the user wrote ("Frank Zappa").
    """
    found: dict[frozenset[str], tuple[str, str]] = {}
    score: dict[frozenset[str], float] = {}
    order: dict[frozenset[str], int] = {}
    for s in sorted(history, key=lambda s: s.turn.index):
        phrases, mentioned = _turn_phrases(s.turn.query, s.turn.response)
        for text, kind, key in phrases:
            weight = _KIND_WEIGHT[kind] * s.weight
            old = found.get(key)
            if old is None or _KIND_WEIGHT[kind] > _KIND_WEIGHT[old[1]] or (
                    kind == old[1] and len(text) > len(old[0])):
                found[key] = (text, kind)
            score[key] = score.get(key, 0.0) + weight
            order.setdefault(key, len(order))
        for key in mentioned:
            score[key] = score.get(key, 0.0) + _RESPONSE_WEIGHT * s.weight
    # short forms support the longer phrase that contains them
    total = dict(score)
    for key in found:
        for other, value in score.items():
            if other != key and other < key:
                total[key] += value
    # the subject the latest turn switched to ("and what about X?") is what its follow-up's
    # "it" means, however often the older subject was named before
    latest = max(history, key=lambda s: s.turn.index).turn if history else None
    switched = {key for _, kind, key in (_turn_phrases(latest.query, latest.response)[0]
                                         if latest is not None else ()) if kind == "cue"}
    ranked = sorted(found, key=lambda k: (k not in switched, -total[k], order[k]))
    return [Antecedent(found[k][0], found[k][1], total[k], k) for k in ranked]


def is_topic(text: str) -> bool:
    """Whether a turn only names a topic ("enterprise value", "Spousal support")."""
    return any(kind == "topic" for _, kind in _question_phrases(text))
