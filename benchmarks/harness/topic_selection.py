"""History selection on human topic labels: which earlier turns a memory hands on.

    python -m benchmarks topics [--split tune|report] [--conversations N] [--set k=v ...]
                                [--out docs/results/topics]

TopiOCQA (Adlakha et al. 2022; CC BY-NC-SA 4.0, read from ``../shared/data/topiocqa/``, never
copied into the repository) gives every turn of a human conversation the Wikipedia article it
is about. Each conversation is replayed into the history database as a deployed memory would
see it: before turn t the memory holds turns < t (question and answer, no passages: the data
has none), is asked to select history for question t, then records turn t. A turn is judged by
its topic label:

- **same**: the previous turn has this turn's topic;
- **return**: the previous turn does not, an earlier one does;
- **new**: no earlier turn does (turns with an empty label, the data's unanswerable ones, are
  not judged; as earlier turns they match no topic).

Per kind: P@1 (the first selected turn has the current topic; nothing selected counts as a
miss), any-selected (some selected turn has it), precision (the share of all selected turns
that have it: what the LLM is handed), turns selected per turn, and on new topics the share of
turns given any history at all. Rules beside the engine: the previous turn, the nearest earlier
turn (the earlier question most similar to this one by the embedder's cosine) and the topic
oracle (every earlier turn of the topic, latest first). P-values: paired sign flips of P@1 per
turn, the turns of one conversation flipped together.

The split is fixed by the conversation number, chosen before any result was seen: even
numbers form the tuning half (defaults may be chosen on it), odd numbers the report half.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.dhrag_systems import MemoEmbedder
from benchmarks.harness.metrics import paired_randomisation_test
from benchmarks.harness.paths import REPO_ROOT, default_cache
from dhrag_core import HistoryDatabase, Settings
from dhrag_core.embedding import Embedder, opening_words
from dhrag_core.settings import with_changes

__all__ = [
    "KINDS", "RULES", "TopicConversation", "TopicTurn", "default_topiocqa", "judge",
    "load_topiocqa", "replay", "split_of", "summarise",
]

KINDS = ("same", "return", "new")
RULES = ("previous", "nearest", "oracle")


def default_topiocqa() -> Path:
    """``../shared/data/topiocqa/topiocqa_train.json.gz`` next to the repository."""
    return REPO_ROOT / ".." / "shared" / "data" / "topiocqa" / "topiocqa_train.json.gz"


@dataclass(frozen=True)
class TopicTurn:
    question: str
    answer: str
    topic: str


@dataclass(frozen=True)
class TopicConversation:
    number: int
    turns: tuple[TopicTurn, ...]

    @property
    def id(self) -> str:
        return f"topiocqa-{self.number}"


def split_of(number: int) -> str:
    """The half a conversation belongs to: ``tune`` (even number) or ``report`` (odd)."""
    return "tune" if number % 2 == 0 else "report"


def load_topiocqa(path: Path | None = None) -> list[TopicConversation]:
    """The conversations of a TopiOCQA file (JSON list of turns, optionally gzipped), in
    conversation-number order, turns in turn order."""
    path = path or default_topiocqa()
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: TopiOCQA train (McGill-NLP/topiocqa, topiocqa_train.json) is "
            "expected in ../shared/data/topiocqa/ (pass --data FILE)")
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = json.load(f)
    by: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(int(r["Conversation_no"]), []).append(r)
    return [TopicConversation(n, tuple(
        TopicTurn(str(r["Question"]), str(r["Answer"]), str(r.get("Topic") or ""))
        for r in sorted(turns, key=lambda r: int(r["Turn_no"]))))
        for n, turns in sorted(by.items())]


def kind_of(topics: Sequence[str], t: int) -> str | None:
    """The kind of turn ``t`` given every turn's topic; ``None`` when it is not judged."""
    here = topics[t]
    if t == 0 or not here:
        return None
    if topics[t - 1] == here:
        return "same"
    return "return" if here in topics[:t - 1] else "new"


@dataclass
class Judged:
    """One judged turn: its kind, conversation, and per system the indexes it selected."""

    conversation: str
    turn: int
    kind: str
    picks: dict[str, list[int]] = field(default_factory=dict)


def judge(topics: Sequence[str], t: int, picks: Sequence[int]) -> dict[str, float]:
    """P@1, any-selected, on-topic and selected counts of one turn's selection."""
    here = topics[t]
    hits = [topics[i] == here for i in picks]
    return {"p1": float(bool(hits) and hits[0]), "any": float(any(hits)),
            "on": float(sum(hits)), "n": float(len(hits))}


def _rule_picks(topics: Sequence[str], qv: np.ndarray, t: int) -> dict[str, list[int]]:
    return {
        "previous": [t - 1],
        "nearest": [int(np.argmax(qv[:t] @ qv[t]))],
        "oracle": [i for i in range(t - 1, -1, -1) if topics[i] == topics[t]],
    }


class _Clock:
    """Replay time: each turn a minute after the previous one."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def encode_cached(embedder: Embedder, texts: Iterable[str], name: str,
                  cache: Path | None) -> MemoEmbedder:
    """A memo of ``embedder`` holding every text's vector, read from (and written to) an
    ``.npz`` under ``cache`` keyed by the texts' hash and ``name``."""
    unique = sorted(set(texts))
    memo = MemoEmbedder(embedder)
    digest = hashlib.sha1("\0".join(unique).encode("utf-8")).hexdigest()[:16]
    file = None if cache is None else cache / f"topiocqa_{name}_{digest}.npz"
    if file is not None and file.is_file():
        memo.preload(unique, np.load(file)["E"])
        return memo
    vectors = np.concatenate([embedder.encode(unique[i:i + 512])
                              for i in range(0, len(unique), 512)])
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        np.savez(file, E=vectors.astype(np.float32))
    memo.preload(unique, vectors)
    return memo


def replay(conversations: Sequence[TopicConversation], embedder: Embedder,
           settings: Settings, *, db_factory: Callable[[Embedder, Settings, Callable[[], float]],
                                                         HistoryDatabase] | None = None,
           ) -> list[Judged]:
    """Replay each conversation into a fresh history session and judge every labelled turn
    for the engine (``dhrag``) and the rules."""
    clock = _Clock()
    db = (db_factory or _default_db)(embedder, settings, clock)
    out: list[Judged] = []
    for conv in conversations:
        session = conv.id
        topics = [t.topic for t in conv.turns]
        qv = embedder.encode([t.question for t in conv.turns])
        index: dict[str, int] = {}
        for t, turn in enumerate(conv.turns):
            clock.now += 60.0
            kind = kind_of(topics, t)
            if kind is not None:
                selected = db.select(session, turn.question)
                picks = {"dhrag": [index[s.turn.turn_id] for s in selected]}
                picks.update(_rule_picks(topics, qv, t))
                out.append(Judged(conv.id, t, kind, picks))
            added = db.add(session, turn.question, turn.answer)
            index.setdefault(added.turn.turn_id, t)
        db.delete_session(session)
    return out


def _default_db(embedder: Embedder, settings: Settings,
                clock: Callable[[], float]) -> HistoryDatabase:
    return HistoryDatabase(embedder=embedder, settings=settings, clock=clock)


def summarise(judged: Sequence[Judged], topics: Mapping[str, Sequence[str]],
              systems: Sequence[str] = ("dhrag", *RULES)) -> dict[str, Any]:
    """Per kind and system: P@1, any-selected, precision, selected per turn (on new topics
    also the share given any history), and P@1's p-value of the engine against each rule."""
    out: dict[str, Any] = {"turns": len(judged),
                           "conversations": len({j.conversation for j in judged})}
    for kind in KINDS:
        sub = [j for j in judged if j.kind == kind]
        if not sub:
            continue
        block: dict[str, Any] = {"turns": len(sub)}
        per: dict[str, list[dict[str, float]]] = {}
        for name in systems:
            scores = [judge(topics[j.conversation], j.turn, j.picks[name]) for j in sub]
            per[name] = scores
            n = sum(s["n"] for s in scores)
            row = {"selected per turn": round(n / len(sub), 3),
                   "precision": round(sum(s["on"] for s in scores) / n, 4) if n else None}
            if kind == "new":
                row["given history"] = round(float(np.mean([s["n"] > 0 for s in scores])), 4)
            else:
                row["P@1"] = round(float(np.mean([s["p1"] for s in scores])), 4)
                row["any selected"] = round(float(np.mean([s["any"] for s in scores])), 4)
            block[name] = row
        if kind != "new" and "dhrag" in per:
            clusters = [j.conversation for j in sub]
            ours = [s["p1"] for s in per["dhrag"]]
            block["p (dhrag vs rule, P@1)"] = {
                name: round(paired_randomisation_test(
                    ours, [s["p1"] for s in per[name]], clusters=clusters), 4)
                for name in systems if name != "dhrag"}
        out[kind] = block
    sel = [j for j in judged if j.picks.get("dhrag")]
    on = sum(judge(topics[j.conversation], j.turn, j.picks["dhrag"])["on"] for j in sel)
    n = sum(len(j.picks["dhrag"]) for j in sel)
    out["dhrag precision, every judged turn"] = round(on / n, 4) if n else None
    return out


def run(conversations: Sequence[TopicConversation], embedder: Embedder,
        settings: Settings) -> tuple[dict[str, Any], list[Judged]]:
    t0 = time.perf_counter()
    judged = replay(conversations, embedder, settings)
    topics = {c.id: [t.topic for t in c.turns] for c in conversations}
    summary = summarise(judged, topics)
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    return summary, judged


def select_conversations(conversations: Sequence[TopicConversation], split: str,
                         limit: int | None) -> list[TopicConversation]:
    chosen = [c for c in conversations if split == "all" or split_of(c.number) == split]
    return chosen[:limit] if limit else chosen


def all_texts(conversations: Sequence[TopicConversation], settings: Settings) -> list[str]:
    """Every text a replay encodes: questions, and answers as the history encodes them."""
    out: list[str] = []
    for c in conversations:
        for t in c.turns:
            out.append(t.question)
            if t.answer:
                out.append(opening_words(t.answer, settings.tree.answer_words))
    return out


def main_args(args: Any) -> dict[str, Any]:
    """``python -m benchmarks topics``: replay, print and write the summary."""
    from benchmarks.harness.crossval import parse_value
    from dhrag_core import MiniLMEmbedder

    changes = {k: parse_value(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    settings = with_changes(Settings(), changes)
    convs = select_conversations(load_topiocqa(args.data), args.split, args.conversations)
    cache = (args.cache or default_cache()).expanduser()
    memo = encode_cached(MiniLMEmbedder(), all_texts(convs, settings), "minilm",
                         cache / "benchmarks")
    summary, _ = run(convs, memo, settings)
    report = {"meta": {"data": "TopiOCQA train", "split": args.split,
                       "conversations": len(convs), "settings": changes,
                       "command": "python -m benchmarks topics " + " ".join(args.argv)},
              "summary": summary}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"topics_{args.split}.json").write_text(text + "\n", encoding="utf-8")
    return report
