"""The word lists the light rewriter reads questions with, and the word-level helpers on them.

Closed classes (determiners, wh-words, auxiliaries, pronouns, prepositions, conjunctions) and
common verbs; ``BOUNDARY`` is the words that end a noun phrase. ``words`` splits text into
words, ``phrase_key`` gives a phrase's content words, ``names_in`` its capitalised names.
"""

from __future__ import annotations

import re

__all__ = [
    "ADVERBS", "AUX", "BOUNDARY", "CONJUNCTIONS", "DETERMINERS", "DO_SUPPORT", "IMPERATIVE",
    "POSSESSIVE", "PREPOSITIONS", "PRONOUNS", "VERBS", "WH",
    "is_capitalised", "names_in", "phrase_key", "words",
]

DETERMINERS = frozenset({"the", "a", "an", "this", "that", "these", "those", "my", "our",
                         "your", "its", "their", "his", "her", "each", "every", "any", "some"})
WH = frozenset({"what", "who", "whom", "whose", "where", "when", "why", "how", "which"})
AUX = frozenset({
    "is", "are", "was", "were", "am", "be", "been", "being", "do", "does", "did", "can",
    "could", "should", "would", "will", "shall", "may", "might", "must", "has", "have", "had",
    "isn't", "aren't", "wasn't", "weren't", "don't", "doesn't", "didn't", "can't", "won't",
})
IMPERATIVE = frozenset({"tell", "give", "list", "explain", "describe", "define", "show",
                        "name", "compare", "find", "please", "ok", "okay", "so", "and", "but",
                        "also", "now", "then", "well", "yes", "no", "thanks", "thank"})
PRONOUNS = frozenset({"i", "you", "we", "he", "she", "it", "they", "me", "him", "her", "us",
                      "them", "its", "his", "their", "our", "your", "my", "mine", "yours",
                      "hers", "theirs", "ours", "itself", "himself", "herself", "themselves",
                      "one", "ones", "someone", "anyone", "anything", "something",
                      "everything", "nothing", "else", "there", "here"})
PREPOSITIONS = frozenset({
    "in", "on", "at", "to", "for", "with", "from", "by", "about", "into", "onto", "over",
    "under", "after", "before", "during", "since", "until", "between", "among", "against",
    "through", "without", "within", "per", "via", "like", "than", "as", "out", "off", "up",
    "down", "around", "across", "behind", "besides", "except", "toward", "towards", "upon",
})
CONJUNCTIONS = frozenset({"and", "or", "but", "nor", "so", "yet", "if", "because", "while",
                          "whether", "that", "then", "when", "where", "also", "not", "too",
                          "very", "more", "most", "less", "least", "much", "many", "just",
                          "only", "ever", "never", "still", "already", "really", "other",
                          "another", "such", "same", "first", "last", "next", "again"})
VERBS = frozenset({
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
ADVERBS = frozenset({"exactly", "actually", "really", "usually", "typically", "generally",
                     "normally", "currently", "still", "even", "ever", "just", "basically"})
DO_SUPPORT = frozenset({"do", "does", "did", "can", "could", "will", "would", "should", "may",
                        "might", "must", "don't", "doesn't", "didn't", "can't", "won't"})
BOUNDARY = WH | AUX | PRONOUNS | PREPOSITIONS | CONJUNCTIONS | VERBS | IMPERATIVE

_WORD = re.compile(r"[A-Za-z0-9][\w'\u2019&.-]*[\w]|[A-Za-z0-9]")
POSSESSIVE = re.compile(r"['\u2019]s?$")


def words(text: str) -> list[re.Match[str]]:
    """The words of ``text``, as matches (their spans index ``text``)."""
    return list(_WORD.finditer(text))


def phrase_key(text: str) -> frozenset[str]:
    """Content words of a phrase, lower-cased, possessive dropped: phrases with the same key
    are one antecedent."""
    out = (POSSESSIVE.sub("", w.lower()) for w in _WORD.findall(text))
    return frozenset(w for w in out if w and w not in BOUNDARY and w not in DETERMINERS)


def is_capitalised(word: str) -> bool:
    """Whether ``word`` starts upper-case, "I" aside."""
    return word[0].isupper() and word.lower() != "i"


def names_in(text: str) -> list[str]:
    """Capitalised spans inside ``text``'s sentences ("Great Wall of China", "NFL"), as
    written."""
    out: list[str] = []
    for sentence in re.split(r"(?<=[.!?:;])\s+|\n+", text):
        ws = words(sentence)
        i = 0
        while i < len(ws):
            w = ws[i].group()
            if not is_capitalised(w) or (i == 0 and w.lower() in BOUNDARY | DETERMINERS):
                i += 1
                continue
            j = i + 1
            while j < len(ws) and not sentence[ws[j - 1].end():ws[j].start()].strip():
                nxt = ws[j].group()
                if is_capitalised(nxt):
                    j += 1
                elif (nxt.lower() in {"of", "de", "the", "and", "&", "von", "van", "du", "la"}
                      and j + 1 < len(ws) and is_capitalised(ws[j + 1].group())):
                    j += 2
                else:
                    break
            if i > 0 or j - i > 1:  # a lone sentence-initial word is rarely a name
                out.append(POSSESSIVE.sub("", sentence[ws[i].start():ws[j - 1].end()]))
            i = j
    return out
