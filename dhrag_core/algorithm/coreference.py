"""Reference resolution for the light rewriter, with word lists and regular expressions only.

A follow-up question leans on the conversation through a referring expression ("it", "his",
"they", "there", "that one") or through what it leaves out ("and in 2019?"). ``antecedents``
finds the phrases the selected turns are about, as they were written (a name, a question's
subject, a turn that names a topic), and ranks them by the weights DH-RAG gave those turns;
``resolve`` puts the best one in the place of the query's first referring expression.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from dhrag_core.records import SelectedTurn

__all__ = [
    "Antecedent", "Resolution", "antecedents", "complete_name", "cue_topic", "is_topic",
    "names_in",
    "phrase_key",
    "referring_expression", "resolve",
]

_DETERMINERS = frozenset({"the", "a", "an", "this", "that", "these", "those", "my", "our",
                          "your", "its", "their", "his", "her", "each", "every", "any", "some"})
_WH = frozenset({"what", "who", "whom", "whose", "where", "when", "why", "how", "which"})
_AUX = frozenset({
    "is", "are", "was", "were", "am", "be", "been", "being", "do", "does", "did", "can",
    "could", "should", "would", "will", "shall", "may", "might", "must", "has", "have", "had",
    "isn't", "aren't", "wasn't", "weren't", "don't", "doesn't", "didn't", "can't", "won't",
})
_IMPERATIVE = frozenset({"tell", "give", "list", "explain", "describe", "define", "show",
                         "name", "compare", "find", "please", "ok", "okay", "so", "and", "but",
                         "also", "now", "then", "well", "yes", "no", "thanks", "thank"})
_PRONOUNS = frozenset({"i", "you", "we", "he", "she", "it", "they", "me", "him", "her", "us",
                       "them", "its", "his", "their", "our", "your", "my", "mine", "yours",
                       "hers", "theirs", "ours", "itself", "himself", "herself", "themselves",
                       "one", "ones", "someone", "anyone", "anything", "something",
                       "everything", "nothing", "else", "there", "here"})
_PREPOSITIONS = frozenset({
    "in", "on", "at", "to", "for", "with", "from", "by", "about", "into", "onto", "over",
    "under", "after", "before", "during", "since", "until", "between", "among", "against",
    "through", "without", "within", "per", "via", "like", "than", "as", "out", "off", "up",
    "down", "around", "across", "behind", "besides", "except", "toward", "towards", "upon",
})
_CONJUNCTIONS = frozenset({"and", "or", "but", "nor", "so", "yet", "if", "because", "while",
                           "whether", "that", "then", "when", "where", "also", "not", "too",
                           "very", "more", "most", "less", "least", "much", "many", "just",
                           "only", "ever", "never", "still", "already", "really", "other",
                           "another", "such", "same", "first", "last", "next", "again"})
_VERBS = frozenset({
    "begin", "began", "begun", "become", "became", "break", "broke", "build", "built", "buy",
    "bought", "cause", "caused", "change", "changed", "come", "came", "cost", "costs", "create",
    "created", "die", "died", "do", "done", "end", "ended", "feel", "felt", "find", "found",
    "get", "gets", "got", "give", "gave", "given", "go", "goes", "went", "gone", "grow", "grew",
    "happen", "happens", "happened", "have", "help", "helped", "hold", "held", "include",
    "includes", "included", "keep", "kept", "know", "knew", "known", "lead", "led", "leave",
    "left", "live", "lived", "look", "looks", "lose", "lost", "make", "makes", "made", "mean",
    "means", "meant", "move", "moved", "need", "needs", "play", "plays", "played", "put",
    "reach", "release", "released", "remain", "run", "ran", "say", "said", "see", "saw", "seen",
    "sell", "sold", "serve", "served", "set", "show", "showed", "shown", "sign", "signed",
    "start", "starts", "started", "stay", "take", "takes", "took", "taken", "tell", "told",
    "think", "thought", "try", "tried", "turn", "turned", "use", "used", "want", "wanted",
    "win", "won", "work", "works", "worked", "write", "wrote", "written", "affect", "affects",
    "apply", "applies", "require", "requires", "required", "compare", "differ", "located",
    "called", "born", "based"
})
_ADVERBS = frozenset({"exactly", "actually", "really", "usually", "typically", "generally",
                      "normally", "currently", "still", "even", "ever", "just", "basically"})
_DO_SUPPORT = frozenset({"do", "does", "did", "can", "could", "will", "would", "should", "may",
                         "might", "must", "don't", "doesn't", "didn't", "can't", "won't"})
_BOUNDARY = _WH | _AUX | _PRONOUNS | _PREPOSITIONS | _CONJUNCTIONS | _VERBS | _IMPERATIVE

_WORD = re.compile(r"[A-Za-z0-9][\w'\u2019&.-]*[\w]|[A-Za-z0-9]")
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


@dataclass(frozen=True)
class Resolution:
    """The rewritten query, the expression replaced (``None``: ellipsis completed) and the
    antecedent put in its place."""

    text: str
    replaced: str | None
    antecedent: Antecedent


def _words(text: str) -> list[re.Match[str]]:
    return list(_WORD.finditer(text))


_POSSESSIVE = re.compile(r"['\u2019]s?$")


def _key(text: str) -> frozenset[str]:
    """Content words of a phrase, lower-cased, possessive dropped: phrases with the same key
    are one antecedent."""
    out = (_POSSESSIVE.sub("", w.lower()) for w in _WORD.findall(text))
    return frozenset(w for w in out if w and w not in _BOUNDARY and w not in _DETERMINERS)


def _is_capitalised(word: str) -> bool:
    return word[0].isupper() and word.lower() != "i"


def _names(text: str) -> list[str]:
    """Capitalised spans inside sentences ("Great Wall of China", "NFL"), as written."""
    out: list[str] = []
    for sentence in re.split(r"(?<=[.!?:;])\s+|\n+", text):
        ws = _words(sentence)
        i = 0
        while i < len(ws):
            w = ws[i].group()
            if not _is_capitalised(w) or (i == 0 and w.lower() in _BOUNDARY | _DETERMINERS):
                i += 1
                continue
            j = i + 1
            while j < len(ws) and not sentence[ws[j - 1].end():ws[j].start()].strip():
                nxt = ws[j].group()
                if _is_capitalised(nxt):
                    j += 1
                elif (nxt.lower() in {"of", "de", "the", "and", "&", "von", "van", "du", "la"}
                      and j + 1 < len(ws) and _is_capitalised(ws[j + 1].group())):
                    j += 2
                else:
                    break
            if i > 0 or j - i > 1:  # a lone sentence-initial word is rarely a name
                out.append(_POSSESSIVE.sub("", sentence[ws[i].start():ws[j - 1].end()]))
            i = j
    return out


def _noun_phrase(
    text: str, ws: list[re.Match[str]], start: int, name_ends: bool = True
) -> str | None:
    """The noun phrase starting at word ``start``: a determiner, then words up to a boundary
    (a verb, preposition, pronoun...); "of" joins a second phrase ("the wall of China").
    With ``name_ends``, a lower-case word after a name ends it ("did Terry Bradshaw retire")."""
    j = start
    if j < len(ws) and ws[j].group().lower() in _DETERMINERS - {"his", "her", "its", "their"}:
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
        if lw in _BOUNDARY or lw in _DETERMINERS or (j > first and not _is_capitalised(w) and (
            (lw.endswith("ed") and len(lw) > 4)
            or (name_ends and _is_capitalised(ws[j - 1].group()))
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
    ws = _words(topic)
    lower = [w.group().lower() for w in ws]
    if (not ws or len(ws) > _CUE_MAX_WORDS
            or lower[0] in _PRONOUNS | _WH | _AUX | _VERBS | _PREPOSITIONS
            or not _key(topic) or any(w in _WH | _AUX for w in lower)):
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
    ws = _words(stripped)
    if not ws:
        return []
    lower = [w.group().lower() for w in ws]
    out: list[tuple[str, str]] = []
    if ("?" not in text and len(ws) <= _TOPIC_MAX_WORDS and lower[0] not in _WH | _AUX
            and lower[0] not in _IMPERATIVE and not any(w in _VERBS for w in lower)):
        out.append((_PAREN.sub("", stripped).strip(), "topic"))
        return out
    i = 0
    while i < len(ws) and lower[i] in _IMPERATIVE:
        i += 1
    if i < len(ws) and lower[i] in _WH:
        i += 1
        if i < len(ws) and lower[i] in {"much", "many", "long", "far", "often", "old", "big"}:
            i += 1
        while i + 1 < len(ws) and lower[i] in _ADVERBS:
            i += 1
    if i + 1 < len(ws) and lower[i] in _AUX | {"me", "about", "us"}:
        i += 1
        while i + 1 < len(ws) and lower[i] in _ADVERBS:
            i += 1
        if lower[i - 1] == "me" and i < len(ws) and lower[i] == "about":
            i += 1
    if i < len(ws) and lower[i] in {"i", "you", "we"} and i + 1 < len(ws) and (
            lower[0] == "how" or lower[0] in _AUX):
        action = stripped[ws[i + 1].start():]
        if action:
            out.append((action, "action"))
    elif 0 < i < len(ws) and i + 1 < len(ws) and lower[0] in {"who", "what", "which"} \
            and lower[i - 1] in _WH and _verb_like(lower[i], lower[i + 1]):
        # "who invented the cotton gin", "what causes sickle cell disease": the object
        subject = _noun_phrase(stripped, ws, i + 1)
        if subject is not None:
            out.append((subject, "phrase"))
        i += 1
    elif 0 < i < len(ws):
        subject = _noun_phrase(stripped, ws, i, name_ends=lower[i - 1] in _DO_SUPPORT)
        end = stripped.index(subject) + len(subject) if subject is not None else 0
        after = _words(stripped[end:])
        runs_on = not after or after[0].group().lower() not in _BOUNDARY
        if (subject is not None and i > 0 and lower[i - 1] in _DO_SUPPORT and runs_on
                and " " in subject.strip() and subject.split()[-1].islower()):
            subject = subject.rsplit(" ", 1)[0]  # "did the band tour": "tour" is the verb
            if subject.lower() in _DETERMINERS:
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
    return (word in _VERBS or (word.endswith("ed") and len(word) > 4)
            or (word.endswith("s") and not word.endswith("ss") and following in _DETERMINERS)
            or (word.endswith("es") and len(word) > 4))


_KIND_WEIGHT = {"topic": 5.0, "cue": 5.0, "name": 1.0, "phrase": 1.0, "action": 1.0, "object": 0.5}
_RESPONSE_WEIGHT = 0.25


@lru_cache(maxsize=4096)
def _turn_phrases(
    query: str, response: str
) -> tuple[tuple[tuple[str, str, frozenset[str]], ...], tuple[frozenset[str], ...]]:
    """A turn's phrases ``(text, kind, key)`` and the keys of the names its response
    mentions; cached, as a session selects the same turns again and again."""
    phrases = _question_phrases(query) + [(n, "name") for n in _names(query)]
    out = []
    for text, kind in phrases:
        text = _PAREN.sub("", text).strip() if kind != "action" else text
        key = _key(text)
        if key:
            out.append((text, kind, key))
    mentioned = tuple(k for k in map(_key, _names(response)) if k)
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
_NOT_A_NOUN_AFTER_HER = _PREPOSITIONS | _CONJUNCTIONS | _AUX | {"to", "and"}


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
        return antecedent.kind == "name" or (_is_capitalised(antecedent.text)
                                             and _is_capitalised(antecedent.text.split()[-1]))
    if e == "there":
        return antecedent.kind in {"name", "topic", "cue"} and _is_capitalised(antecedent.text)
    return antecedent.kind != "action" or e == "it"


def _replacement(query: str, m: re.Match[str], a: Antecedent) -> str:
    e = m.group().lower()
    text = a.text
    if e == "there":
        return f"in {text}"
    role = _PERSONAL.get(e) or _NEUTER.get(e) or "subject"
    if role == "her":
        nxt = _words(query[m.end():])
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
            return Resolution(text, ordinal.group(), Antecedent(item, "name", 0.0, _key(item)))
    m = referring_expression(query)
    gap = _OBJECT_GAP.search(query) if m is None else None
    if m is None and gap is None:
        return None
    cands = antecedents(history) if candidates is None else candidates
    if gap is not None:  # "how long did it take to build?": build what?
        obj = next((a for a in cands if a.kind in ("name", "topic", "cue", "phrase")), None)
        if obj is None or obj.key & _key(query):
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
    named = _key(lead)
    if agreeing and (agreeing[0].key & named or (
            _TOPIC_LEAD.search(lead) and any(a.key <= named for a in cands))):
        return None  # the query names its subject itself
    if _names(lead) and (_CLAUSE.search(lead) or _PERSONAL.get(expression.lower()) in (
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
        if (many and later and many.lower() not in _BOUNDARY | _DETERMINERS
                and e in ("they", "them", "their", "themselves")):
            return True
    return False


def complete_name(query: str, antecedent: Antecedent) -> str | None:
    """``query`` with a capitalised short form of ``antecedent`` written in full ("How long
    is the Wall?" -> "How long is the great wall of China?"); ``None`` when it has none."""
    ws = _words(query)
    i = 0
    while i < len(ws):
        j = i
        while j < len(ws) and _is_capitalised(ws[j].group()) and (
                _key(ws[j].group()) and _key(ws[j].group()) <= antecedent.key):
            j += 1
        if j == i:
            i += 1
            continue
        start, end = ws[i].start(), ws[j - 1].end()
        if not _key(query[start:end]) < antecedent.key or _in_longer_name(query, ws, i, j):
            return None
        text = antecedent.text
        possessive = _POSSESSIVE.search(query[start:end])
        if possessive:
            text = _possessive(text)
        lead = _words(text)
        if i > 0 and ws[i - 1].group().lower() in _DETERMINERS and lead and (
                lead[0].group().lower() in _DETERMINERS):
            start = ws[i - 1].start()
        return query[:start] + text + query[end:]
    return None


def _in_longer_name(text: str, ws: list[re.Match[str]], i: int, j: int) -> bool:
    """Whether words ``i``..``j - 1`` of ``text`` are part of a longer capitalised name, the
    sentence's first word aside: "Frank" in "Frank Sinatra" is not Frank Zappa."""
    def joined(k: int) -> bool:
        return (0 < k < len(ws) and not text[ws[k - 1].end():ws[k].start()].strip()
                and _is_capitalised(ws[k].group()) and _is_capitalised(ws[k - 1].group()))
    return joined(j) or (i > 1 and joined(i))


def names_in(text: str) -> list[str]:
    """Capitalised spans inside ``text``'s sentences ("Great Wall of China", "NFL")."""
    return _names(text)


def phrase_key(text: str) -> frozenset[str]:
    """Content words of ``text``, lower-cased, possessives dropped (an antecedent's ``key``)."""
    return _key(text)


def is_topic(text: str) -> bool:
    """Whether a turn only names a topic ("enterprise value", "Spousal support")."""
    return any(kind == "topic" for _, kind in _question_phrases(text))


def _list_item(response: str, ordinal: str) -> str | None:
    """The ``ordinal`` item the answer listed: a numbered or bulleted line's first phrase,
    else a name of its prose ("the Triple Bridge, the Dragon Bridge and ...")."""
    lines = [re.split(r"[:.;,(]| - ", line, maxsplit=1)[0].strip()
             for line in _LIST_LINE.findall(response)]
    items = [x for x in lines if x] or _names(response)
    i = _ORDINALS[ordinal]
    return items[i] if -len(items) <= i < len(items) else None
