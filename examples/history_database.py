"""The history database on its own: store turns, search them, survive a restart (offline).

    python examples/history_database.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from dhrag_core import HistoryDatabase, Limits, NumpyMiniLMEmbedder, Settings


def main() -> None:
    embedder = NumpyMiniLMEmbedder()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'history.db'}"
        db = HistoryDatabase(embedder=embedder, store=url,
                             settings=Settings(limits=Limits(capacity=100)))
        db.add("alice",
               "What is the Great Wall of China built out of?",
               "Stone, brick, tamped earth and wood.",
               passages=["The Great Wall is made of stone, brick, tamped earth and wood."])
        db.add("alice",
               "Where do guinea pigs sleep in the wild?",
               "In burrows dug by other animals.",
               passages=["Wild cavies shelter in the burrows of other animals."])
        db.close()

        db = HistoryDatabase(embedder=embedder, store=url)  # a restart: same history
        for hit in db.search("alice", "How long is the wall?", k=2):
            print(f"{hit.weight:.2f}  {hit.turn.query}")
        db.close()


if __name__ == "__main__":
    main()
