"""Query rewriters scored on CANARD dev against the human standalone rewrites.

    python -m benchmarks.studies.rewriters [--data PATH] [--limit N] [--out results/]

Each CANARD question comes with its dialogue so far (article title, section title, then
alternating questions and answers). The history is given to a rewriter the way DH-RAG gives it:
as ``SelectedTurn`` records -- the title and section as a first turn, then one turn per earlier
question and answer -- weighted by recency (half-life ``Settings().weighting.half_life_turns``
turns, the latest turn weighing 1). Rows scored: the raw question (baseline), ``LightRewriter``
as the engine runs it (substitution), the former appender (``mode="append"``), and ``LLMRewriter``
when an OpenAI-compatible endpoint is configured (``OPENAI_BASE_URL`` +
``DHRAG_MODEL``/``OPENAI_MODEL``), else reported as skipped.

Metrics, on lower-cased words with punctuation dropped: corpus BLEU-4 (uniform weights, brevity
penalty, no smoothing), ROUGE-1 and ROUGE-L F1 (mean over questions, and per history depth:
the number of earlier question/answer turns), and the added words: the content words
(``dhrag_core.embedding.tokens``: stop words dropped, light stemming) that the human rewrite
adds to the question against those the output adds, as micro precision, recall and F1 over
all questions (``added_f1_words``: the same on every word). Also the share of questions
changed, exact-entity recall (capitalised words the rewrite brings in, no precision) and
queries/s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from dhrag_core.algorithm.rewriting import LightRewriter, QueryRewriter, Rewrite
from dhrag_core.embedding import tokens
from dhrag_core.records import SelectedTurn, Turn
from dhrag_core.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "canard" / "dev.json"
_DIM = 8
_ZERO = np.zeros(_DIM, dtype=np.float32)
_NO_PASSAGES = np.zeros((0, _DIM), dtype=np.float32)


# -- data ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One CANARD question: the dialogue so far as selected history, and the human rewrite."""

    dialog_id: str
    number: int
    question: str
    rewrite: str
    history: tuple[SelectedTurn, ...]


def _turn(index: int, query: str, response: str, weight: float) -> SelectedTurn:
    turn = Turn(session_id="canard", turn_id=str(index), index=index, query=query, passages=(),
                response=response, timestamp=0.0, query_vector=_ZERO, response_vector=_ZERO,
                passage_vectors=_NO_PASSAGES)
    return SelectedTurn(turn=turn, relevance=0.0, recency=weight, weight=weight,
                        via=("recent",), cluster_id=-1, cluster_label="", summary=None,
                        chain_id=-1)


def build_history(history: Sequence[str], half_life: float) -> tuple[SelectedTurn, ...]:
    """``[title, section, q1, a1, q2, a2, ...]`` as selected turns, newest weighing 1.

    The title and section form turn 0 (query: the title, response: the section).
    """
    if len(history) < 2:
        raise ValueError(f"a CANARD History starts with title and section, got {history!r}")
    pairs = [(history[0], history[1])]
    rest = list(history[2:])
    pairs += [(rest[i], rest[i + 1] if i + 1 < len(rest) else "") for i in range(0, len(rest), 2)]
    last = len(pairs) - 1
    return tuple(_turn(i, q, a, 0.5 ** ((last - i) / half_life))
                 for i, (q, a) in enumerate(pairs))


def load_canard(
    path: Path = DEFAULT_DATA, limit: int | None = None, half_life: float | None = None
) -> list[Example]:
    """The first ``limit`` (default all) questions of a CANARD split file."""
    if not path.is_file():
        raise FileNotFoundError(
            f"CANARD file {path} not found: get data/release/dev.json from "
            "github.com/aagohary/canard (CC BY-SA 4.0) and pass --data PATH/dev.json")
    rows = json.loads(path.read_text(encoding="utf-8"))
    hl = Settings().weighting.half_life_turns if half_life is None else half_life
    return [
        Example(dialog_id=r["QuAC_dialog_id"], number=int(r["Question_no"]),
                question=r["Question"], rewrite=r["Rewrite"],
                history=build_history(r["History"], hl))
        for r in rows[:limit]
    ]


# -- metrics -------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")
_CAPITALISED = re.compile(r"\b[A-Z][A-Za-z0-9]*")


def words(text: str) -> list[str]:
    """Lower-cased alphanumeric words (punctuation dropped): what BLEU and ROUGE compare."""
    return _WORD.findall(text.lower())


def _ngrams(seq: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(seq[i : i + n]) for i in range(len(seq) - n + 1))


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], order: int = 4) -> float:
    """Corpus BLEU (Papineni et al. 2002), one reference each, 0-100, no smoothing."""
    if len(hypotheses) != len(references):
        raise ValueError("hypotheses and references must have the same length")
    matched = [0] * order
    total = [0] * order
    hyp_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references, strict=True):
        h, r = words(hyp), words(ref)
        hyp_len += len(h)
        ref_len += len(r)
        for n in range(1, order + 1):
            hn, rn = _ngrams(h, n), _ngrams(r, n)
            matched[n - 1] += sum(min(c, rn[g]) for g, c in hn.items())
            total[n - 1] += max(len(h) - n + 1, 0)
    if hyp_len == 0 or min(matched) == 0:
        return 0.0
    log_p = sum(math.log(m / t) for m, t in zip(matched, total, strict=True)) / order
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(log_p)


def _f1(overlap: int, hyp: int, ref: int) -> float:
    if overlap == 0:
        return 0.0
    p, r = overlap / hyp, overlap / ref
    return 2 * p * r / (p + r)


def rouge1_f1(hypothesis: str, reference: str) -> float:
    """ROUGE-1 F1: clipped unigram overlap."""
    h, r = Counter(words(hypothesis)), Counter(words(reference))
    return _f1(sum((h & r).values()), sum(h.values()), sum(r.values()))


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rougel_f1(hypothesis: str, reference: str) -> float:
    """ROUGE-L F1: longest common subsequence of words."""
    h, r = words(hypothesis), words(reference)
    return _f1(_lcs(h, r), len(h), len(r))


def entities(question: str, rewrite: str) -> set[str]:
    """Words capitalised in ``rewrite`` but absent from ``question`` (stop words dropped,
    light-stemmed): the names a standalone rewrite had to bring in."""
    present = set(tokens(question))
    return {t for m in _CAPITALISED.findall(rewrite) for t in tokens(m)} - present


def entity_recall(question: str, rewrite: str, output: str) -> tuple[int, int]:
    """``(found, total)``: how many of the rewrite's new entities the output contains."""
    wanted = entities(question, rewrite)
    return len(wanted & set(tokens(output))), len(wanted)


def added_overlap(
    question: str, rewrite: str, output: str, tokenise: Callable[[str], list[str]] = tokens
) -> tuple[int, int, int]:
    """``(shared, output_added, rewrite_added)``: the words ``output`` and ``rewrite`` add to
    ``question`` (multisets), how many they share, and how many each adds."""
    q = Counter(tokenise(question))
    ref, out = Counter(tokenise(rewrite)) - q, Counter(tokenise(output)) - q
    return sum((ref & out).values()), sum(out.values()), sum(ref.values())


def _prf(counts: Sequence[tuple[int, int, int]]) -> tuple[float, float, float]:
    shared = sum(c[0] for c in counts)
    p = shared / max(sum(c[1] for c in counts), 1)
    r = shared / max(sum(c[2] for c in counts), 1)
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def depth_bucket(example: Example) -> str:
    """Earlier question/answer turns before the question: ``0``, ``1``, ``2-3``, ``4-6``,
    ``7+``."""
    d = len(example.history) - 1
    return "0" if d <= 0 else "1" if d == 1 else "2-3" if d <= 3 else "4-6" if d <= 6 else "7+"


DEPTHS = ("0", "1", "2-3", "4-6", "7+")


def score(examples: Sequence[Example], outputs: Sequence[str]) -> dict[str, Any]:
    """BLEU-4, ROUGE-1/L F1 (overall and by depth), added-word precision/recall/F1, entity
    recall (macro and micro) and the share changed."""
    if len(examples) != len(outputs):
        raise ValueError("one output per example")
    refs = [e.rewrite for e in examples]
    recalls = [entity_recall(e.question, e.rewrite, o) for e, o in zip(examples, outputs,
                                                                          strict=True)]
    with_entities = [(f, t) for f, t in recalls if t]
    n = max(len(examples), 1)
    rl = [rougel_f1(o, e.rewrite) for e, o in zip(examples, outputs, strict=True)]
    by_depth: dict[str, list[float]] = {}
    for e, r in zip(examples, rl, strict=True):
        by_depth.setdefault(depth_bucket(e), []).append(r)
    added = _prf([added_overlap(e.question, e.rewrite, o) for e, o in zip(examples, outputs,
                                                                          strict=True)])
    added_words = _prf([added_overlap(e.question, e.rewrite, o, words)
                        for e, o in zip(examples, outputs, strict=True)])
    return {
        "n": len(examples),
        "bleu4": corpus_bleu(outputs, refs),
        "rouge1_f1": sum(map(rouge1_f1, outputs, refs)) / n,
        "rougel_f1": sum(rl) / n,
        "rougel_by_depth": {d: sum(v) / len(v) for d in DEPTHS if (v := by_depth.get(d))},
        "depth_n": {d: len(v) for d in DEPTHS if (v := by_depth.get(d))},
        "added_precision": added[0],
        "added_recall": added[1],
        "added_f1": added[2],
        "added_f1_words": added_words[2],
        "entity_recall": (sum(f / t for f, t in with_entities) / len(with_entities)
                          if with_entities else 0.0),
        "entity_recall_micro": (sum(f for f, _ in with_entities)
                                / max(sum(t for _, t in with_entities), 1)),
        "with_entities": len(with_entities),
        "changed": sum(o != e.question for e, o in zip(examples, outputs, strict=True)) / n,
    }


# -- running -------------------------------------------------------------------------------


class RawQuestion:
    """The baseline: the question as asked."""

    def rewrite(self, query: str, history: Sequence[SelectedTurn]) -> Rewrite:
        return Rewrite(query)


def run_rewriter(
    rewriter: QueryRewriter, examples: Sequence[Example]
) -> tuple[list[str], float]:
    """Outputs for every example and the seconds the rewriter took."""
    t0 = time.perf_counter()
    outputs = [rewriter.rewrite(e.question, e.history).text for e in examples]
    return outputs, time.perf_counter() - t0


def _llm_rewriter() -> QueryRewriter | None:
    from dhrag_core.algorithm.llm_rewriting import LLMRewriter
    from dhrag_core.llm import llm_from_env

    llm = llm_from_env()
    return None if llm is None else LLMRewriter(llm)


def evaluate(
    examples: Sequence[Example],
    rewriters: dict[str, QueryRewriter | None],
) -> dict[str, dict[str, Any]]:
    """Scores and throughput per rewriter; ``None`` marks a skipped one."""
    results: dict[str, dict[str, Any]] = {}
    for name, rewriter in rewriters.items():
        if rewriter is None:
            results[name] = {"skipped": True}
            continue
        outputs, seconds = run_rewriter(rewriter, examples)
        row: dict[str, Any] = score(examples, outputs)
        row["seconds"] = seconds
        row["queries_per_s"] = len(examples) / seconds if seconds > 0 else math.inf
        row["samples"] = [
            {"question": e.question, "rewrite": e.rewrite, "output": o}
            for e, o in list(zip(examples, outputs, strict=True))[:5]
        ]
        results[name] = row
    return results


def markdown(results: dict[str, dict[str, Any]]) -> str:
    """The results as markdown: the scores, then ROUGE-L F1 by history depth."""
    lines = [
        "| rewriter | n | BLEU-4 | ROUGE-L F1 | added P | added R | added F1 | changed | q/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        if r.get("skipped"):
            lines.append(f"| {name} | skipped (no endpoint configured) | | | | | | | |")
            continue
        lines.append(
            f"| {name} | {r['n']} | {r['bleu4']:.1f} | {r['rougel_f1']:.3f} | "
            f"{r['added_precision']:.3f} | {r['added_recall']:.3f} | {r['added_f1']:.3f} | "
            f"{r['changed']:.0%} | {r['queries_per_s']:,.0f} |"
        )
    scored = {k: r for k, r in results.items() if not r.get("skipped")}
    if scored:
        first = next(iter(scored.values()))
        depths = list(first["rougel_by_depth"])
        lines += ["", "| ROUGE-L F1 by earlier turns | " + " | ".join(
            f"{d} (n={first['depth_n'][d]})" for d in depths) + " |",
            "|---|" + "---|" * len(depths)]
        lines += [f"| {name} | " + " | ".join(f"{r['rougel_by_depth'][d]:.3f}" for d in depths)
                  + " |" for name, r in scored.items()]
    return "\n".join(lines)


def default_rewriters(llm: bool = True) -> dict[str, QueryRewriter | None]:
    """Raw question, the light rewriter (substitution, as the engine runs it), the former
    appender (gated, as the engine ran it), and the LLM."""
    rewriters: dict[str, QueryRewriter | None] = {
        "question (raw)": RawQuestion(),
        "light": LightRewriter(),
        "append (former light)": LightRewriter(mode="append"),
    }
    if llm:
        rewriters["llm"] = _llm_rewriter()
    return rewriters


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.studies.rewriters", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="CANARD split (dev.json)")
    ap.add_argument("--limit", type=int, default=None, help="first N questions only")
    ap.add_argument("--out", type=Path, default=Path("results"), help="folder for the JSON")
    ap.add_argument("--no-llm", action="store_true", help="do not score the LLM rewriter")
    args = ap.parse_args(argv)
    try:
        examples = load_canard(args.data, args.limit)
    except FileNotFoundError as exc:
        print(f"python -m benchmarks.studies.rewriters: error: {exc}", file=sys.stderr)
        return 2
    rewriters = default_rewriters(llm=not args.no_llm)
    results = evaluate(examples, rewriters)
    print(f"CANARD {args.data.name}: {len(examples)} questions\n")
    print(markdown(results))
    if results.get("llm", {}).get("skipped"):
        print("\nllm: skipped (set OPENAI_BASE_URL and DHRAG_MODEL to score LLMRewriter)")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "rewriters_canard.json"
    meta = {"data": os.path.relpath(args.data.resolve(), REPO_ROOT), "questions": len(examples),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "half_life_turns": Settings().weighting.half_life_turns,
            "llm": repr(getattr(rewriters.get("llm"), "llm", None))}
    path.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n",
                    encoding="utf-8")
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
