"""Reference resolution for the light rewriter, with word lists and regular expressions only.

A follow-up question leans on the conversation through a referring expression ("it", "his",
"they", "there", "that one") or through what it leaves out ("and in 2019?"). ``antecedents``
(``subjects``) finds the phrases the selected turns are about and ranks them; ``resolve``
puts the best one in the place of the query's first referring expression, ``complete_name``
writes a short form of it in full.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from dhrag_core.algorithm.lexicon import (
    AUX,
    BOUNDARY,
    CONJUNCTIONS,
    DETERMINERS,
    POSSESSIVE,
    PREPOSITIONS,
    is_capitalised,
    names_in,
    phrase_key,
    words,
)
from dhrag_core.algorithm.subjects import Antecedent, antecedents, cue_topic
from dhrag_core.records import SelectedTurn

__all__ = [
    "Resolution", "antecedents", "complete_name", "cue_topic", "referring_expression", "resolve",
]


@dataclass(frozen=True)
class Resolution:
    """The rewritten query, the expression replaced (``None``: ellipsis completed) and the
    antecedent put in its place."""

    text: str
    replaced: str | None
    antecedent: Antecedent


_PERSONAL = {"he": "subject", "she": "subject", "him": "object", "his": "possessive",
             "her": "her", "hers": "object", "himself": "object", "herself": "object"}
_NEUTER = {"one": "object", "it": "subject", "its": "possessive", "itself": "object",
           "they": "subject", "them": "object", "their": "possessive", "themselves": "object"}
_REFERRING = re.compile(
    r"\b(?:(?:that|this)\s+one|the\s+(?:former|latter)|"
    r"he|she|him|his|her|hers|himself|herself|it|its|itself|they|them|their|themselves|"
    r"there|(?<=[a-z] )one(?=\s*[?.!]*\s*$))\b",
    re.IGNORECASE,
)
_EXISTENTIAL = re.compile(r"\b(?:is|are|was|were|be|been)\s+there\b|\bthere\s+(?:\w+ly\s+)?"
                          r"(?:is|are|was|were|be|been|will|would|have|has|had|isn't|aren't)\b",
                          re.IGNORECASE)
_EXTRAPOSED = re.compile(r"\s+(?:is\s+|was\s+)?(?:an?\s+)?\w+\s+to\s+\w", re.IGNORECASE)
_EVENT = re.compile(r"^\W*(?:\w+\s+)?(?:take|takes|took|cost|costs|last|lasts|worth|safe|hard|"
                    r"easy|difficult|possible|necessary|legal|expensive|cheap|required|work|"
                    r"works|help|helps|hurt)\b", re.IGNORECASE)
_OBJECT_GAP = re.compile(r"\bit\s+(?:\w+\s+)?to\s+(?:build|make|buy|use|get|fix|visit|"
                         r"see|find|open|close|clean|install|replace|repair|finish|complete|"
                         r"cook|create|write|learn|read|watch|reach|sell|run|start)(?=\W*$)",
                         re.IGNORECASE)
_CLAUSE = re.compile(r"[,;:?]|\b(?:and|but|or|if|when|because|so|then|before|after|while|"
                     r"until|since|although|though|once|unless)\b", re.IGNORECASE)
_SUBJECT = re.compile(
    r"(?:^\W*(?:(?:how|why|what|where|when|which|who)\s+)?(?:does|do|did|is|are|was|were|can|"
    r"could|will|would|should|may|might|must)|\b(?:if|when|whenever|once|because|since|after|"
    r"before|until|while|although|though|and|but|or))\s+"
    r"(?:(?P<one>an?)\s+(?-i:[a-z])[\w-]*|(?P<many>(?-i:[a-z])[\w-]*s))\b",
    re.IGNORECASE,
)
"""A clause's lower-case subject that introduces a referent of the question's own: an
indefinite ("how does a bee", "if a dog") or a bare plural ("how do vaccines")."""
_ORDINAL = re.compile(r"\bthe\s+(first|second|third|fourth|fifth|last)(?:\s+one)?\b"
                      r"(?=\s*(?:[?.!,]|$|(?:in|of|on|about|for|from|with)\b))", re.IGNORECASE)
_ORDINALS = {"first": 0, "second": 1, "third": 2, "fourth": 3, "fifth": 4, "last": -1}
_LIST_LINE = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022])\s+(.+?)\s*$", re.MULTILINE)
_TOPIC_LEAD = re.compile(r"[:;,]|\b(?:back\s+to|as\s+for|regarding)\b", re.IGNORECASE)
_NOT_A_NOUN_AFTER_HER = PREPOSITIONS | CONJUNCTIONS | AUX | {"to", "and"}


def referring_expression(query: str) -> re.Match[str] | None:
    """The query's first referring expression ("it", "his", "that one", "there"...)."""
    for m in _REFERRING.finditer(query):
        if m.group().lower() == "there" and _EXISTENTIAL.search(
                query[max(0, m.start() - 12):m.end() + 12]):
            continue
        if m.group().lower() == "it" and _EXTRAPOSED.match(query, m.end()):
            continue  # "is it safe to..." / "it is hard to...": "it" stands for what follows
        return m
    return None


def _possessive(text: str) -> str:
    return f"{text}'" if text.endswith("s") and not text.endswith("ss") else f"{text}'s"


def _agrees(expression: str, antecedent: Antecedent) -> bool:
    e = expression.lower()
    if e in _PERSONAL:  # a name, not a thing of one ("Apple's revenue")
        return antecedent.kind == "name" or (is_capitalised(antecedent.text)
                                             and is_capitalised(antecedent.text.split()[-1]))
    if e == "there":
        return antecedent.kind in {"name", "topic", "cue"} and is_capitalised(antecedent.text)
    return antecedent.kind != "action" or e == "it"


def _replacement(query: str, m: re.Match[str], a: Antecedent) -> str:
    e = m.group().lower()
    text = a.text
    if e == "there":
        return f"in {text}"
    role = _PERSONAL.get(e) or _NEUTER.get(e) or "subject"
    if role == "her":
        nxt = words(query[m.end():])
        noun_follows = bool(nxt) and nxt[0].start() <= 1 and (
            nxt[0].group().lower() not in _NOT_A_NOUN_AFTER_HER)
        role = "possessive" if noun_follows else "object"
    if role == "possessive":
        return _possessive(text)
    if m.start() == 0 and text[:1].islower() and m.group()[:1].isupper():
        return text[:1].upper() + text[1:]
    return text


def resolve(
    query: str, history: Sequence[SelectedTurn], candidates: Sequence[Antecedent] | None = None
) -> Resolution | None:
    """Substitute the best agreeing antecedent for the query's first referring expression.

    ``None`` when the query has no referring expression, names before it a phrase of the
    selected turns ("Back to the coffee machine: how loud is it?"), or no phrase agrees
    with it (no "he" for a lower-case phrase). ``candidates`` defaults to
    ``antecedents(history)``.
    """
    ordinal = _ORDINAL.search(query)
    if ordinal is not None and history:
        item = _list_item(max(history, key=lambda s: s.turn.index).turn.response,
                          ordinal.group(1).lower())
        if item is not None:
            text = query[:ordinal.start()] + item + query[ordinal.end():]
            return Resolution(text, ordinal.group(),
                              Antecedent(item, "name", 0.0, phrase_key(item)))
    m = referring_expression(query)
    gap = _OBJECT_GAP.search(query) if m is None else None
    if m is None and gap is None:
        return None
    cands = antecedents(history) if candidates is None else candidates
    if gap is not None:  # "how long did it take to build?": build what?
        obj = next((a for a in cands if a.kind in ("name", "topic", "cue", "phrase")), None)
        if obj is None or obj.key & phrase_key(query):
            return None
        return Resolution(f"{query[:gap.end()]} {obj.text}{query[gap.end():]}", None, obj)
    assert m is not None
    if cue_topic(query[:m.start()])[0] is not None:
        return None  # "how about Romeo and Juliet, when was that one written?": named there
    expression = m.group()
    agreeing = [a for a in cands if _agrees(expression, a)]
    if _EVENT.search(query[m.end():]):
        agreeing.sort(key=lambda a: a.kind != "action")  # "how long does it take?"
    else:
        agreeing = [a for a in agreeing if a.kind != "action"]
    lead = query[:m.start()]
    named = phrase_key(lead)
    if agreeing and (agreeing[0].key & named or (
            _TOPIC_LEAD.search(lead) and any(a.key <= named for a in cands))):
        return None  # the query names its subject itself
    if names_in(lead) and (_CLAUSE.search(lead) or _PERSONAL.get(expression.lower()) in (
            "possessive", "her") or _NEUTER.get(expression.lower()) == "possessive"):
        return None  # "Is Herpes lethal and how is it transmitted?": the name is the antecedent
    if _own_subject(lead, expression):
        return None  # "How does a bee find its way home?": the bee, not the conversation
    for a in agreeing:
        if a.kind == "action":
            head = query.rstrip()
            end = len(head.rstrip("?.!"))
            return Resolution(f"{head[:end]} to {a.text}{head[end:]}", None, a)
        new = _replacement(query, m, a)
        return Resolution(query[:m.start()] + new + query[m.end():], expression, a)
    return None


def _own_subject(lead: str, expression: str) -> bool:
    """Whether ``lead``, the question before its referring ``expression``, has a subject of its
    own for it: an indefinite for "its" / "itself" or for "it" in a later clause ("What does
    a cat do when it is scared?"), a bare plural for "they" in a later clause ("How do vaccines
    work and are they safe?"). Not in the same clause ("Did a critic review it?"), where the
    pronoun is not the subject's."""
    e = expression.lower()
    for m in _SUBJECT.finditer(lead):
        later = _CLAUSE.search(lead, m.end()) is not None
        if m.group("one") and e in ("it", "its", "itself") and (later or e != "it"):
            return True
        many = m.group("many")
        if (many and later and many.lower() not in BOUNDARY | DETERMINERS
                and e in ("they", "them", "their", "themselves")):
            return True
    return False


def complete_name(query: str, antecedent: Antecedent) -> str | None:
    """``query`` with a capitalised short form of ``antecedent`` written in full ("How long
    is the Wall?" -> "How long is the great wall of China?"); ``None`` when it has none."""
    ws = words(query)
    i = 0
    while i < len(ws):
        j = i
        while j < len(ws) and is_capitalised(ws[j].group()) and (
                phrase_key(ws[j].group()) and phrase_key(ws[j].group()) <= antecedent.key):
            j += 1
        if j == i:
            i += 1
            continue
        start, end = ws[i].start(), ws[j - 1].end()
        if not phrase_key(query[start:end]) < antecedent.key or _in_longer_name(query, ws, i, j):
            return None
        text = antecedent.text
        possessive = POSSESSIVE.search(query[start:end])
        if possessive:
            text = _possessive(text)
        lead = words(text)
        if i > 0 and ws[i - 1].group().lower() in DETERMINERS and lead and (
                lead[0].group().lower() in DETERMINERS):
            start = ws[i - 1].start()
        return query[:start] + text + query[end:]
    return None


def _in_longer_name(text: str, ws: list[re.Match[str]], i: int, j: int) -> bool:
    """Whether words ``i``..``j - 1`` of ``text`` are part of a longer capitalised name, the
    sentence's first word aside: "Frank" in "Frank Sinatra" is not Frank Zappa."""
    def joined(k: int) -> bool:
        return (0 < k < len(ws) and not text[ws[k - 1].end():ws[k].start()].strip()
                and is_capitalised(ws[k].group()) and is_capitalised(ws[k - 1].group()))
    return joined(j) or (i > 1 and joined(i))



def _list_item(response: str, ordinal: str) -> str | None:
    """The ``ordinal`` item the answer listed: a numbered or bulleted line's first phrase,
    else a name of its prose ("the Triple Bridge, the Dragon Bridge and ...")."""
    lines = [re.split(r"[:.;,(]| - ", line, maxsplit=1)[0].strip()
             for line in _LIST_LINE.findall(response)]
    items = [x for x in lines if x] or names_in(response)
    i = _ORDINALS[ordinal]
    return items[i] if -len(items) <= i < len(items) else None
