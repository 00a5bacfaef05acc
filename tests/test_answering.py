"""The offline extractive answerer: the sentence that answers, or no answer (issue 22)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dhrag_core import HashingEmbedder
from dhrag_core.app.answering import ExtractiveAnswerer, answer_kind, content_words
from dhrag_core.records import Passage

REPO = Path(__file__).resolve().parents[1]
ROWS = {
    r["id"]: r
    for r in (
        json.loads(line) for line in (REPO / "dhrag_core/data/demo_kb.jsonl").open(encoding="utf-8")
    )
}
IDS = list(ROWS)


def demo(pid: str) -> Passage:
    r = ROWS[pid]
    return Passage(text=r["text"], id=pid, title=r["title"])


#: A product manual of the kind a newcomer chats over (the failures reported in issue 22).
MANUAL = Passage(
    id="x3.md#0",
    title="x3.md",
    text=(
        "x3\nFrequently asked questions.\n\n"
        "How heavy is the X3? The X3 weighs 1.6 kg with the battery fitted, so it is light enough "
        "for overhead work.\n\n"
        "How long does charging take? Charging from empty takes about 25 minutes with the supplied "
        "charger. The battery lasts for about 40 minutes of continuous drilling.\n\n"
        "Error codes. Error E03 means the battery is too hot; let it cool for ten minutes before "
        "use. Error E07 means the motor is blocked; release the trigger and clear the bit. Error "
        "E11 means the firmware update failed and must be repeated."
    ),
)

#: (question, demo passage id -- real MTRAG ClapNQ Wikipedia text -- or None for the manual,
#: a piece of the sentence that answers). Written before the scoring was changed; 18 of 27
#: were right with embedding similarity alone.
CASES: list[tuple[str, str | None, str]] = [
    ("How long is the Penobscot River?", "798401030_718-1091-0-369", "109 - mile - long"),
    (
        "How big is the Penobscot drainage basin?",
        "798401030_718-1091-0-369",
        "drainage basin contains 8,610",
    ),
    (
        "How were prairie dogs taken from the wild?",
        "800134210_17002-17428-0-426",
        "removed from their underground burrows",
    ),
    (
        "Do prairie dogs breed well in captivity?",
        "800134210_17002-17428-0-426",
        "difficult to breed in captivity",
    ),
    (
        "When did the Atlanta Thrashers start playing?",
        "801828967_44058-44688-0-630",
        "Thrashers began play in 1999",
    ),
    (
        "When did Atlanta United start playing?",
        "801828967_44058-44688-0-630",
        "Atlanta United FC began play",
    ),
    (
        "Did the Atlanta Chiefs win a championship?",
        "801828967_44058-44688-0-630",
        "won a national championship in 1968",
    ),
    ("Where does the Euphrates flow?", "807574222_1788-2448-0-604", "flows through Syria and Iraq"),
    ("How long do platypuses live?", "830769116_14819-15700-0-881", "survived to 17 years"),
    (
        "What animals prey on the platypus?",
        "830769116_14819-15700-0-881",
        "Natural predators include snakes",
    ),
    ("Is the platypus nocturnal?", "830769116_14819-15700-0-881", "regarded as nocturnal"),
    ("What do red pandas eat?", "853538822_9130-9510-0-380", "two - thirds bamboo"),
    ("Why do red pandas eat so much bamboo?", "853538822_9130-9510-0-380", "digest cellulose"),
    (
        "How tall is the outer wall of the Colosseum?",
        "866060352_14767-15478-0-711",
        "height of the outer wall is 48",
    ),
    ("How long is the Colosseum?", "866060352_14767-15478-0-711", "elliptical in plan and is 189"),
    ("How many migrants died in 2002?", "828235044_58738-59038-0-300", "a dozen migrants died"),
    (
        "What does a balloon pilot need to carry paying passengers?",
        "846398233_32670-33147-0-477",
        "commercial pilot certificate",
    ),
    (
        "What attacks adult loggerheads?",
        "817296188_17904-18816-0-912",
        "Adults are more rarely attacked",
    ),
    (
        "What did Grimm find on the last day?",
        "801295479_12475-13070-0-595",
        "looked like a propeller",
    ),
    (
        "Do eagles prey on brown bears?",
        "804692331_92096-92585-0-489",
        "two records of golden eagles",
    ),
    (
        "Why did the rope break on the Matterhorn?",
        "809108991_33131-34234-0-1103",
        "weakest and oldest",
    ),
    (
        "What position does Eden Hazard play?",
        "802186199_48956-49732-0-776",
        "attacking midfielder or a winger",
    ),
    ("What does error E03 mean?", None, "E03 means the battery is too hot"),
    ("What does error E07 mean?", None, "E07 means the motor is blocked"),
    ("How heavy is it? (x3)", None, "weighs 1.6 kg"),
    ("How long does it take? (charging x3)", None, "takes about 25 minutes"),
    ("How long does the battery last?", None, "lasts for about 40 minutes"),
]
NONSENSE = ["asdf qwerty zxcv", "blorp fizzle wug snarf?", "What is the capital of Mongolia?"]


def context(pid: str | None) -> list[Passage]:
    """The answering passage first, then two others, as the chat's top three."""
    if pid is None:
        return [MANUAL, demo(IDS[0]), demo(IDS[5])]
    i = IDS.index(pid)
    return [demo(pid), demo(IDS[(i + 7) % len(IDS)]), demo(IDS[(i + 31) % len(IDS)])]


@pytest.mark.model
def test_minilm_extracts_the_answering_sentence_and_knows_when_it_cannot() -> None:
    from dhrag_core import MiniLMEmbedder

    answerer = ExtractiveAnswerer(MiniLMEmbedder())
    right = [
        q
        for q, pid, expected in CASES
        if (found := answerer.answer(q, context(pid))) is not None and expected in found.text
    ]
    assert len(right) >= 0.8 * len(CASES), sorted({q for q, _, _ in CASES} - set(right))
    for q in (
        "What does error E03 mean?",
        "How heavy is it? (x3)",
        "How long does it take? (charging x3)",
    ):
        assert q in right  # the three misses reported in issue 22
    for q in NONSENSE:
        for ctx in (context(None), context(IDS[3])):
            assert answerer.answer(q, ctx) is None, q


def test_rare_shared_words_pick_the_sentence() -> None:
    answerer = ExtractiveAnswerer(HashingEmbedder())
    found = answerer.answer("What does error E03 mean?", [MANUAL])
    assert found is not None and "E03 means the battery is too hot" in found.text
    found = answerer.answer("And E11?", [MANUAL])
    assert found is not None and "E11 means the firmware update failed" in found.text


def test_questions_in_the_text_are_never_the_answer() -> None:
    faq = Passage(
        id="faq#0",
        title="faq.md",
        text="faq\nHow long does charging the X3 take? "
        "Charging takes about 25 minutes with the supplied charger.",
    )
    found = ExtractiveAnswerer(HashingEmbedder()).answer("How long does charging take?", [faq])
    assert found is not None and found.text.startswith("Charging takes about 25 minutes")


def test_the_kind_of_answer_asked_for_wins_a_close_call() -> None:
    text = (
        "x3\nThe X3 drill is sold in a blue case with two bits. "
        "The X3 drill weighs 1.6 kg with its battery."
    )
    found = ExtractiveAnswerer(HashingEmbedder()).answer(
        "How heavy is the X3 drill?", [Passage(text=text, id="x3#0", title="x3")]
    )
    assert found is not None and "1.6 kg" in found.text
    assert answer_kind("How heavy is it?") == "weight"
    assert answer_kind("How long does it take?") == "duration"
    assert answer_kind("How long is the Great Wall?") == "size"
    assert answer_kind("When did the Berlin Wall fall?") == "year"
    assert answer_kind("How many people died?") == "number"
    assert answer_kind("Who built it?") is None
    assert content_words("The guinea pigs' burrows, attacked") == {
        "guinea",
        "pig",
        "burrow",
        "attack",
    }


def test_no_answer_when_nothing_matches() -> None:
    answerer = ExtractiveAnswerer(HashingEmbedder())
    assert answerer.answer("qwerty zxcv", [MANUAL]) is None
    assert answerer.answer("anything", []) is None
    only_questions = Passage(text="faq\nWhat is it? How heavy is it?", id="q", title="faq")
    assert answerer.answer("How heavy is it?", [only_questions]) is None
