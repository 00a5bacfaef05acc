"""Build the small knowledge base shipped for `dhrag demo` from the MTRAG data (offline).

Takes every passage shown in seven MTRAG ClapNQ conversations (Wikipedia text, CC BY-SA 3.0,
via IBM's MTRAG benchmark, Apache-2.0), 120 seeded-random ClapNQ passages of the pool, and the
pool's 8 nearest ClapNQ passages to each elliptical demo question read alone ("How long is
it?") -- the distractors any real knowledge base holds -- and stores their MiniLM vectors
beside them so the demo starts without encoding.

    python scripts/build_demo_kb.py [--data ../shared/data/mtrag]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

import numpy as np

from dhrag_core import MiniLMEmbedder
from dhrag_core.algorithm.rewriting import is_incomplete
from dhrag_core.app.demo import DEMO_TURNS

TOPICS = ["great wall of china", "guinea pigs", "wall in berlin", "bone marrow",
          "shapes of the moon", "cotton gin"]
OUT = Path(__file__).resolve().parents[1] / "dhrag_core" / "data"


def _with_vectors(rows: list[dict[str, str]], npz_path: Path) -> tuple[list[dict[str, str]],
                                                                       np.ndarray]:
    """The rows whose text the shared MiniLM matrix embedded (by SHA-1), with their vectors."""
    npz = np.load(npz_path)
    ids, hashes, matrix = npz["ids"], npz["text_sha1"], npz["E"]
    row_of = {str(i): n for n, i in enumerate(ids)}
    keep, vecs = [], []
    for r in rows:
        n = row_of.get(r["id"])
        digest = hashlib.sha1(r["text"].encode()).hexdigest()[:16]
        if n is not None and digest == str(hashes[n]):
            keep.append(r)
            vecs.append(matrix[n])
    return keep, np.stack(vecs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/mtrag")
    args = ap.parse_args()
    data = Path(args.data)
    passages: dict[str, dict[str, str]] = {}
    lines = (data / "conversations.jsonl").read_text(encoding="utf-8").split("\n")
    for line in filter(str.strip, lines):
        conv = json.loads(line)["record"]
        first = conv["messages"][0]["text"].lower()
        if conv.get("domain") != "clapnq" and "clapnq" not in json.dumps(conv.get("retriever")):
            continue
        if not any(t in first for t in TOPICS):
            continue
        for m in conv["messages"]:
            for ctx in m.get("contexts") or []:
                passages[ctx["document_id"]] = {
                    "id": ctx["document_id"], "title": ctx.get("title", ""), "text": ctx["text"],
                    "source": "MTRAG ClapNQ conversation context (Wikipedia, CC BY-SA 3.0)",
                }
    pool_lines = (data / "corpus_pool.jsonl").read_text(encoding="utf-8").split("\n")
    pool = [json.loads(line) for line in pool_lines if line.strip()]
    wiki = [p for p in pool if p.get("title") and p["id"] not in passages and "-" in p["id"]
            and p["id"].split("_")[0].isdigit()]
    source = "MTRAG ClapNQ corpus passage (Wikipedia, CC BY-SA 3.0)"
    for p in random.Random(7).sample(wiki, 120):
        passages[p["id"]] = {"id": p["id"], "title": p["title"], "text": p["text"].strip(),
                             "source": source}
    embedder = MiniLMEmbedder()
    elliptical = [q for q in DEMO_TURNS if is_incomplete(q)]
    wiki, wiki_vecs = _with_vectors(wiki, data / "kb_minilm.npz")
    for qv in embedder.encode(elliptical):
        for i in np.argsort(-(wiki_vecs @ qv))[:8]:
            p = wiki[int(i)]
            passages.setdefault(p["id"], {"id": p["id"], "title": p["title"],
                                          "text": p["text"].strip(), "source": source})
    rows = sorted(passages.values(), key=lambda r: r["id"])
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "demo_kb.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    vectors = embedder.encode([r["text"] for r in rows])
    digest = hashlib.sha1("\n".join(r["text"] for r in rows).encode()).hexdigest()
    np.savez_compressed(OUT / "demo_kb_minilm.npz", E=vectors.astype(np.float16),
                        text_sha1=np.array(digest))
    print(f"wrote {len(rows)} passages to {OUT}")


if __name__ == "__main__":
    main()
