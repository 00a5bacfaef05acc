"""Build the small knowledge base shipped for `dhrag demo` from the MTRAG data (offline).

Takes every passage shown in seven MTRAG ClapNQ conversations (Wikipedia text, CC BY-SA 3.0,
via IBM's MTRAG benchmark, Apache-2.0) plus 120 seeded-random ClapNQ passages of the pool as
distractors, and stores their MiniLM vectors beside them so the demo starts without encoding.

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

TOPICS = ["great wall of china", "guinea pigs", "wall in berlin", "bone marrow",
          "shapes of the moon", "cotton gin"]
OUT = Path(__file__).resolve().parents[1] / "dhrag_core" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="../shared/data/mtrag")
    args = ap.parse_args()
    data = Path(args.data)
    passages: dict[str, dict[str, str]] = {}
    lines = (data / "conversations.jsonl").read_text(encoding="utf-8").splitlines()
    for line in lines:
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
    pool_lines = (data / "corpus_pool.jsonl").read_text(encoding="utf-8").splitlines()
    pool = [json.loads(line) for line in pool_lines]
    wiki = [p for p in pool if p.get("title") and p["id"] not in passages and "-" in p["id"]
            and p["id"].split("_")[0].isdigit()]
    for p in random.Random(7).sample(wiki, 120):
        passages[p["id"]] = {"id": p["id"], "title": p["title"], "text": p["text"].strip(),
                             "source": "MTRAG ClapNQ corpus passage (Wikipedia, CC BY-SA 3.0)"}
    rows = sorted(passages.values(), key=lambda r: r["id"])
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "demo_kb.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    vectors = MiniLMEmbedder().encode([r["text"] for r in rows])
    digest = hashlib.sha1("\n".join(r["text"] for r in rows).encode()).hexdigest()
    np.savez_compressed(OUT / "demo_kb_minilm.npz", E=vectors.astype(np.float16),
                        text_sha1=np.array(digest))
    print(f"wrote {len(rows)} passages to {OUT}")


if __name__ == "__main__":
    main()
