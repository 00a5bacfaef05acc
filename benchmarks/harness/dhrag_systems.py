"""DH-RAG systems for the retrieval harness: the default pipeline and its ablations.

Each system runs the real ``dhrag_core.DHRAG`` engine (what users run) with an in-memory store,
one session per conversation: ``retrieve`` is ``select``, ``observe`` is ``record`` with the
passages the system itself retrieved and the dataset's answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from benchmarks.harness.systems import BenchContext, register_system
from dhrag_core import (
    DHRAG,
    ChainPolicy,
    Embedder,
    Experiments,
    Integration,
    LLMRewriter,
    Passage,
    QueryRewriter,
    Retrieval,
    Settings,
    ThreadPolicy,
    Threads,
    Weighting,
)
from dhrag_core.llm import llm_from_env
from dhrag_core.records import Selection, Vector
from dhrag_core.settings import with_changes

__all__ = [
    "ABLATIONS", "HISTORY_STAGES", "SKIPPED", "DHRAGSystem", "MemoEmbedder", "ThreadOracleSystem",
    "register_variants",
]

ABLATIONS = ("clustering", "hierarchy", "chains", "recency", "integration", "rewrite", "cues")
HISTORY_STAGES = ("history_s", "rewrite_s", "expand_s", "integrate_s")
"""Stages of ``select`` that are DH-RAG's own work (not embedding, not the KB search); with
``record``'s ``update_s`` they make the history work of a turn."""


class MemoEmbedder:
    """Remembers each text's vector, so systems replaying the same turns encode them once."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.dimension = inner.dimension
        self._memo: dict[str, Vector] = {}

    def encode(self, texts: Sequence[str]) -> Vector:
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            for t, v in zip(missing, self.inner.encode(missing), strict=True):
                self._memo[t] = v
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])

    def preload(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Remember vectors computed elsewhere by the same model (the KB cache's)."""
        self._memo.update(zip(texts, np.asarray(vectors, dtype=np.float32), strict=True))


_MEMOS: dict[int, MemoEmbedder] = {}


def memo_for(embedder: Embedder) -> MemoEmbedder:
    if isinstance(embedder, MemoEmbedder):
        return embedder
    return _MEMOS.setdefault(id(embedder), MemoEmbedder(embedder))


class DHRAGSystem:
    """``System`` adapter over a ``DHRAG`` engine."""

    def __init__(
        self, name: str, ctx: BenchContext, settings: Settings, *, own_memo: bool = False,
        rewriter: QueryRewriter | None = None, thread_policy: ThreadPolicy | None = None,
        chain_policy: ChainPolicy | None = None,
    ) -> None:
        self.name = name
        self.reference = False
        inner = ctx.kb.embedder
        if isinstance(inner, MemoEmbedder):
            inner = inner.inner
        # the headline system pays for its own encodings, like each baseline does, so its
        # latency ratio is fair; ablations share one memo to keep the run short
        embedder = MemoEmbedder(inner) if own_memo else memo_for(inner)
        self.engine = DHRAG(ctx.kb, embedder=embedder, settings=settings, rewriter=rewriter,
                            thread_policy=thread_policy, chain_policy=chain_policy)
        self.session = ""
        self._selection: Selection | None = None
        self.last_history_s: float | None = None
        self.comparisons = 0
        """Vectors the history matching compared with queries, over the replay."""

    @property
    def selection(self) -> Selection | None:
        """The selection of the question retrieved last, until it is observed."""
        return self._selection

    def start(self, conversation_id: str) -> None:
        self.session = f"conv-{conversation_id}"
        self.engine.reset(self.session)

    def retrieve(self, question: str, k: int) -> list[Passage]:
        before = self._compared()
        self._selection = self.engine.select(self.session, question, k)
        self.comparisons += self._compared() - before
        return self._selection.passages

    def _compared(self) -> int:
        return self.engine.history.comparisons(self.session)

    def observe(self, question: str, passages: list[Passage], answer: str) -> None:
        sel = self._selection if self._selection and self._selection.query == question else None
        added = self.engine.record(self.session, question, answer or "", selection=sel,
                                   passages=passages)
        self.last_history_s = added.timings.get("update_s", 0.0) + (
            sum(sel.timings.get(k, 0.0) for k in HISTORY_STAGES) if sel is not None else 0.0
        )
        self._selection = None


class ThreadOracleSystem(DHRAGSystem):
    """The dhrag engine given perfect thread separation: one session per original conversation
    of an interleaved session (a reference: it reads the thread of each turn from the data)."""

    def __init__(self, name: str, ctx: BenchContext, settings: Settings) -> None:
        super().__init__(name, ctx, settings)
        self.reference = True
        self.threads = ctx.threads
        self.conversation = ""
        self.turn = 0
        self.seen: set[str] = set()

    def start(self, conversation_id: str) -> None:
        self.conversation, self.turn, self.seen = conversation_id, 0, set()

    def retrieve(self, question: str, k: int) -> list[Passage]:
        self.turn += 1
        thread = self.threads.get((self.conversation, self.turn), self.conversation)
        self.session = f"thread-{self.conversation}-{thread}"
        if thread not in self.seen:
            self.seen.add(thread)
            self.engine.reset(self.session)
        return super().retrieve(question, k)


SKIPPED: dict[str, str] = {}
"""Systems not registered in this run, with the reason (printed by the CLI)."""


def _register_llm() -> None:
    """``dhrag-llm``: DH-RAG with the LLM rewriter, when an OpenAI-compatible endpoint is
    configured (``DHRAG_MODEL``/``OPENAI_MODEL``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``)."""
    llm = llm_from_env()
    if llm is None:
        SKIPPED["dhrag-llm"] = "no OpenAI-compatible endpoint configured (set DHRAG_MODEL, ...)"
        return
    register_system(
        "dhrag-llm",
        lambda ctx: DHRAGSystem(
            "dhrag-llm", ctx, Settings(experiments=Experiments(rewrite_vector=True)), own_memo=True,
            rewriter=LLMRewriter(llm),
        ),
        description="DH-RAG with the LLM rewriter (the rewritten text is embedded)",
    )


def register_variants(variants: Mapping[str, Mapping[str, object]]) -> None:
    """Register dhrag under each name with those settings changed from the defaults (what an
    analysis plug-in compares; the description lists the changes)."""
    def build(name: str, changes: Mapping[str, object]) -> Callable[[BenchContext], DHRAGSystem]:
        return lambda ctx: DHRAGSystem(name, ctx, with_changes(Settings(), changes))

    for name, changes in variants.items():
        register_system(name, build(name, changes), replace=True,
                        description=", ".join(f"{k}={v}" for k, v in changes.items()))


def _register() -> None:
    register_system("dhrag", lambda ctx: DHRAGSystem("dhrag", ctx, Settings(), own_memo=True),
                    description="DH-RAG, default settings, light rewriter (no LLM)")
    register_system(
        "thread-oracle",
        lambda ctx: ThreadOracleSystem("thread-oracle", ctx, Settings()), reference=True,
        description="dhrag with one session per original conversation (perfect threads)")
    names = {k.name for k in Settings.knobs()}

    def ablation(part: str) -> Callable[[BenchContext], DHRAGSystem]:
        return lambda ctx: DHRAGSystem(
            f"dhrag-no-{part}", ctx, with_changes(Settings(), {f"use_{part}": False})
        )

    for part in ABLATIONS:
        assert f"use_{part}" in names
        register_system(f"dhrag-no-{part}", ablation(part), description=f"DH-RAG without {part}")
    register_system(
        "dhrag-one-thread",
        lambda ctx: DHRAGSystem("dhrag-one-thread", ctx,
                                Settings(threads=Threads(thread_variants=1))),
        description="DH-RAG searching with T*'s expanded query only (no runner-up threads)")
    register_system(
        "dhrag-hedge-always",
        lambda ctx: DHRAGSystem("dhrag-hedge-always", ctx,
                                Settings(threads=Threads(hedge_margin=None))),
        description="DH-RAG searching the runner-up threads however far below T* they are")
    if Settings().integration.lexical_weight:
        register_system(
            "dhrag-no-lexical",
            lambda ctx: DHRAGSystem("dhrag-no-lexical", ctx,
                                    Settings(integration=Integration(lexical_weight=0.0))),
            description="DH-RAG ranking without the question's own words (lexical_weight=0)")
    if Settings().weighting.root_weight:
        register_system(
            "dhrag-no-root",
            lambda ctx: DHRAGSystem("dhrag-no-root", ctx,
                                    Settings(weighting=Weighting(root_weight=0.0))),
            description="DH-RAG without the thread's opening turn in the expansion "
                        "(root_weight=0)")
    register_system(
        "dhrag-no-clarity-gate",
        lambda ctx: DHRAGSystem("dhrag-no-clarity-gate", ctx,
                                Settings(retrieval=Retrieval(clarity_threshold=None))),
        description="DH-RAG expanding every query, also those clear on their own")


_register()
_register_llm()
