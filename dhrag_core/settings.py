"""The pipeline's settings: small frozen option objects, one per group, validated at
construction.

``Settings(retrieval=Retrieval(expansion=0.5))`` sets a knob (or ``dataclasses.replace``);
``settings.retrieval.expansion`` reads it. Each field is declared with its description and its
valid range beside it (``_knob``); ``Settings.knobs()`` lists them, the docstrings and
``docs/settings.md`` are written from them, and construction checks every value against its
range. ``Experiments`` fences the knobs that change no figure at their defaults: experiments,
not defaults to tune. ``with_changes`` applies flat ``KEY=VALUE`` changes (benchmark CLIs).
"""

from __future__ import annotations

import difflib
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

__all__ = [
    "GROUPS", "Ablations", "DHRAGSettings", "Experiments", "Integration", "Knob", "Limits",
    "Retrieval", "Settings", "Threads", "Tree", "Weighting", "with_changes",
]

T = TypeVar("T")

GROUPS = {
    "limits": "Limits: what one turn, session and process may hold",
    "weighting": "Weighting: the update rule and the history's selection inside a thread",
    "tree": "Tree: topic clusters, summary nodes, chains and topic vectors",
    "threads": "Threads: which thread T* a query continues, and hedging",
    "retrieval": "Retrieval: the expanded query and the knowledge-base search",
    "integration": "Integration: how knowledge-base and history passages are ranked together",
    "ablations": "Ablations: each switch turns off exactly the part it names",
    "experiments": "Experiments: neutral at their defaults (no figure moves); experiments, "
                   "not defaults to tune",
}
"""The groups of ``Settings``: its fields, in order, each holding one option object."""


@dataclass(frozen=True)
class Knob:
    """One setting: its group, description and valid values.

    Attributes:
        name: The field's name in its group.
        group: A key of ``GROUPS``: the field of ``Settings`` holding it.
        doc: What it does and why.
        default: The default value.
        kind: ``"number"``, ``"int"``, ``"bool"`` or ``"choice"``.
        low, high: Inclusive bounds of a number or int.
        optional: ``None`` is valid (it turns the knob off).
        choices: The valid strings of a ``"choice"``.
    """

    name: str
    group: str
    doc: str
    default: Any
    kind: str
    low: float = -math.inf
    high: float = math.inf
    optional: bool = False
    choices: tuple[str, ...] = ()

    def valid(self) -> str:
        """The valid values, as text."""
        if self.kind == "bool":
            text = "True or False"
        elif self.kind == "choice":
            text = " or ".join(repr(c) for c in self.choices)
        else:
            text = f"[{_num(self.low)}, {_num(self.high)}]" + (
                " (int)" if self.kind == "int" else "")
        return text + (" or None" if self.optional else "")

    @property
    def path(self) -> str:
        """``group.name``: how it is read (``settings.retrieval.expansion``) and named in
        errors."""
        return f"{self.group}.{self.name}"

    def check(self, value: Any) -> None:
        """Raise ``TypeError`` (wrong type) or ``ValueError`` (out of range) naming the knob."""
        if value is None and self.optional:
            return
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise TypeError(f"{self.path} must be a bool, got {value!r}")
        elif self.kind == "choice":
            if value not in self.choices:
                raise ValueError(f"{self.path} must be {self.valid()}, got {value!r}")
        else:
            _check_range(self.path, value, self.low, self.high, integer=self.kind == "int")


def _num(x: float) -> str:
    return "inf" if x == math.inf else f"{x:g}" if abs(x) < 1e6 else f"{x:.0e}"


def _check_range(name: str, value: Any, low: float, high: float, *, integer: bool = False) -> None:
    kind = "an int" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {kind} in [{low}, {high}], got {type(value).__name__}")
    if integer and not isinstance(value, int):
        raise TypeError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")


def _knob(default: T, doc: str, *, low: float = -math.inf, high: float = math.inf,
          integer: bool = False, optional: bool = False, choices: Sequence[str] = ()) -> T:
    """A dataclass field carrying its ``Knob`` (name and group are filled in by ``knobs``)."""
    if isinstance(default, bool):
        kind = "bool"
    elif choices:
        kind = "choice"
    else:
        kind = "int" if integer else "number"
    spec = Knob("", "", " ".join(doc.split()), default, kind, low, high,
                optional or default is None, tuple(choices))
    out: T = field(default=default, metadata={"knob": spec})
    return out


_BIG = 10**9


@dataclass(frozen=True)
class _Group:
    """One group of knobs: a frozen option object checked at construction."""

    GROUP: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for knob in self.knobs():
            knob.check(getattr(self, knob.name))

    @classmethod
    def knobs(cls) -> tuple[Knob, ...]:
        """The group's knobs with their description and valid values, in declared order."""
        return tuple(replace(f.metadata["knob"], name=f.name, group=cls.GROUP)
                     for f in fields(cls))


@dataclass(frozen=True)
class Limits(_Group):
    GROUP: ClassVar[str] = "limits"

    max_query_chars: int = _knob(8_192, """Longest query used: a longer one is cut
        to it (at a word boundary, with a warning), so a long pasted message still gets its
        turn.""", low=1, high=_BIG, integer=True)

    max_text_chars: int = _knob(1_000_000, """Longest accepted response or passage
        text.""", low=1, high=10**10, integer=True)

    max_passages: int = _knob(50, "Most passages stored with one turn.",
                              low=0, high=10**6, integer=True)

    max_metadata_chars: int = _knob(1_000_000, """Longest accepted turn metadata, as
        JSON text.""", low=2, high=10**10, integer=True)

    max_passage_metadata_chars: int = _knob(10_000, """Longest metadata of a stored
        passage, as JSON text: a retriever's larger fields are dropped (largest first), as
        they would be copied into every turn that shows the passage.""",
        low=2, high=10**10, integer=True)

    capacity: int = _knob(1_000, """Most triples kept per session (paper eq. 14);
        the lowest weights are evicted.""", low=1, high=_BIG, integer=True)

    max_sessions_in_memory: int = _knob(1_000, """Most sessions whose indexes a
        ``HistoryDatabase`` keeps in memory; the least recently used beyond it are dropped and
        reloaded from the store when used again (the store is the source of truth).""",
        low=1, high=_BIG, integer=True)

    vector_cache_size: int = _knob(10_000, """Passage vectors ``DHRAG`` keeps (LRU)
        for knowledge bases that return text only: a conversation keeps meeting the same
        passages.""", low=0, high=_BIG, integer=True)

    max_pending: int = _knob(4096, """Sessions whose selections ``DHRAG`` keeps until
        their turns are recorded (least recently selected dropped first).""",
        low=1, high=_BIG, integer=True)

    max_pending_bytes: int = _knob(128 * 2**20, """Bytes the selections ``DHRAG``
        keeps until their turns are recorded may hold, all sessions together (their passages'
        texts and vectors, estimated); the least recently selected are dropped first, the
        newest always kept.""", low=1, high=10**15, integer=True)



@dataclass(frozen=True)
class Weighting(_Group):
    GROUP: ClassVar[str] = "weighting"

    alpha: float = _knob(0.5, """Balance of relevance against recency in the
        history weight (paper eq. 13): ``w = alpha * relevance + (1 - alpha) * recency``.""",
        low=0.0, high=1.0)

    half_life_turns: float = _knob(4.0, """A stored turn's recency halves every
        this many turns of its session (of its thread, when selecting inside one).""",
        low=1e-9, high=math.inf)

    half_life_seconds: float | None = _knob(86_400.0, """...and every this many
        seconds of wall clock; ``None`` ignores time.""", low=1e-9, high=math.inf,
        optional=True)

    merge_threshold: float = _knob(0.97, """Similarity above which a new turn
        whose query *and* response match a stored one is merged into it instead of stored
        twice.""", low=0.0, high=1.0)

    history_turns: int = _knob(2, "Most history turns selected per query.",
                               low=1, high=10**6, integer=True)

    root_weight: float = _knob(0.75, """The turn that opened the thread (its
        earliest in the window weighed) also expands the query, with this times its relevance
        to the query (unsharpened), when the ``history_turns`` best do not already hold it: a
        thread's first question usually names what its follow-ups leave out. 0: off.""",
        low=0.0, high=100.0)

    relevance: str = _knob("query", """What a stored turn's relevance to the query
        compares: ``"query"`` (its query, as paper eq. 13), ``"topic"`` (query pulled toward
        answer and passages) or ``"max"`` of both.""", choices=("query", "topic", "max"))

    relevance_contrast: float | None = _knob(0.1, """If set, relevances are
        sharpened around the best match at this temperature before weighting
        (``scoring.contrast``); ``None`` keeps eq. 13 as is.""", low=1e-6, high=100.0,
        optional=True)



@dataclass(frozen=True)
class Tree(_Group):
    GROUP: ClassVar[str] = "tree"

    cluster_threshold: float = _knob(0.5, """A turn joins a topic cluster whose
        centroid it matches this well.""", low=-1.0, high=1.0)

    cluster_min_quality: float = _knob(0.6, """A cluster whose mean member-to-centroid
        similarity falls below this is split locally.""", low=-1.0, high=1.0)

    cluster_merge_every: int = _knob(16, """Every this many turns, clusters whose
        centroids converged merge.""", low=1, high=10**6, integer=True)

    chain_threshold: float = _knob(0.45, """A turn continues a chain whose latest turn
        or centroid it matches this well.""", low=-1.0, high=1.0)

    summary_size: int = _knob(8, "Most turns under one summary node.",
                              low=1, high=10**6, integer=True)

    min_tree_turns: int = _knob(64, """Below this many turns, matching scans flat (the
        tree cannot help).""", low=0, high=_BIG, integer=True)

    tree_clusters: int = _knob(3, "Beam width of hierarchical matching: clusters.",
                               low=1, high=10**6, integer=True)

    tree_summaries: int = _knob(6, "Beam width of hierarchical matching: summary nodes.",
                                low=1, high=10**6, integer=True)

    tree_turns: int = _knob(8, "Beam width of hierarchical matching: turns.",
                            low=1, high=10**6, integer=True)

    topic_answer_weight: float = _knob(3.0, """A turn's topic vector is its query plus
        this times its answer (and ``topic_passage_weight`` times its passages' mean);
        clustering, chains and expansion all use it.""", low=0.0, high=100.0)

    topic_passage_weight: float = _knob(3.0, """Weight of the passages' mean in a
        turn's topic vector (see ``topic_answer_weight``).""", low=0.0, high=100.0)

    answer_vector: str = _knob("passages", """How ``add`` gets the response's vector:
        ``"passages"`` derives it from the passages stored with it (their vectors, weighted by
        the squared share of the response's content words each one contains: no encoding)
        when the response drew on them (``answer_share``), else encodes it; ``"encode"``
        always encodes it.""", choices=("passages", "encode"))

    answer_share: float = _knob(0.5, """The response drew on its passages when one of
        them holds at least this share of its content words; an answer that did not (written
        from other sources, or saying it cannot answer) is encoded, as its passages would
        misstate it. 0: derived whenever a word is shared.""", low=0.0, high=1.0)

    answer_words: int | None = _knob(24, """Words of a response that are encoded when
        it is (its opening states its point; a short text keeps the turn's cost low);
        ``None``: all of it.""", low=1, high=_BIG, integer=True, optional=True)



@dataclass(frozen=True)
class Threads(_Group):
    GROUP: ClassVar[str] = "threads"

    thread_recency: float = _knob(0.2, """Bonus of a recently active thread (chain)
        when choosing the thread T* that a query continues (relevance of its best turn + this
        x its recency).""", low=0.0, high=10.0)

    thread_half_life: float = _knob(2.0, """Turns of the session after which that
        bonus halves.""", low=1e-9, high=math.inf)

    thread_decision: str = _knob("fitted", """How T* is chosen: ``"fitted"``
        (``algorithm.topic_shift``: a question stays with the latest answered turn's thread,
        goes back to the earlier thread it matches best, or starts a new topic and is given
        no history, by a small decision fitted on human topic labels; unanswered turns anchor
        nothing and are not handed on) or ``"scores"`` (the thread score alone: relevance plus
        ``thread_recency``, with ``thread_switch`` and ``follow_up_margin``).""",
        choices=("fitted", "scores"))

    thread_link: float | None = _knob(0.3, """A new turn joins the thread chosen for
        its query when the query matched that thread this well (else it links by its topic
        vector, ``chain_threshold``); ``None`` links by topic vector only.""",
        low=-1.0, high=1.0, optional=True)

    thread_switch: float | None = _knob(0.2, """Leaving the thread of the latest
        turn for another needs a relevance of at least this to the other thread (a new topic,
        matching nothing well, stays put); ``None``: the best thread score decides alone.""",
        low=-1.0, high=1.0, optional=True)

    follow_up_margin: float = _knob(0.3, """A follow-up that names nothing ("who
        was it built for?": a referring word or almost no content words, no cue) leaves the
        thread of the latest turn only for a thread at least this much more relevant
        (``use_cues``).""", low=0.0, high=2.0)

    thread_variants: int = _knob(3, """Threads whose reconstructed query searches
        the knowledge base: T* and the runner-ups by thread score. Each passage counts by its
        best match over these queries, so a wrong guess of T* costs less (1: T* only). A
        knowledge base searched by text is searched once, with the rewrite in T*; these
        queries re-rank its candidates.""", low=1, high=10**6, integer=True)

    hedge_margin: float | None = _knob(0.2, """A runner-up thread is searched only
        when its relevance to the query is within this of T*'s (a clear choice is not
        hedged); ``None``: always.""", low=0.0, high=2.0, optional=True)



@dataclass(frozen=True)
class Retrieval(_Group):
    GROUP: ClassVar[str] = "retrieval"

    kb_k: int = _knob(20, "Passages fetched from the knowledge base per query.",
                      low=1, high=10**6, integer=True)

    text_k: int | None = _knob(None, """Passages fetched from a knowledge base
        searched by text (it has no ``search_vectors``), to be re-ranked by the expanded query
        vector; ``None``: ``kb_k``.""", low=1, high=10**6, integer=True)

    context_k: int = _knob(10, """Passages in the integrated context (at most
        ``max_passages``: a turn stores the passages it showed).""",
        low=1, high=10**6, integer=True)

    expansion: float = _knob(0.4, """Weight of the selected history in the
        expanded query vector.""", low=0.0, high=100.0)

    follow_up_expansion: float = _knob(0.6, """``expansion`` for a follow-up that
        names nothing and stays in the latest turn's thread (``use_cues``): only the history
        says what it is about.""", low=0.0, high=100.0)

    expansion_weights: str = _knob("share", """How the selected turns' weights
        scale their pull on the expanded query: ``"share"`` divides each by their sum, so that
        ``expansion`` is the history's whole weight however large relevances come out on the
        embedder; ``"absolute"`` uses them as they are (their sum scales the pull).""",
        choices=("share", "absolute"))

    clarity_threshold: float | None = _knob(0.66, """A query the knowledge base
        answers clearly on its own -- the best similarity of the raw query to a passage found
        (by the expanded queries) at least this -- is ranked by the raw query alone: history
        expands only queries that need it; ``None``: always expanded.""",
        low=-1.0, high=1.0, optional=True)



@dataclass(frozen=True)
class Integration(_Group):
    GROUP: ClassVar[str] = "integration"

    lexical_weight: float = _knob(0.16, """Weight of the question's words in the
        integration logits: each candidate gains this times the IDF-weighted share of the
        rewritten query's content words it contains (the question and the antecedents the
        rewriter filled in; IDF among the query's candidates: ``lexical.word_overlap``); 0:
        off.""", low=0.0, high=10.0)



@dataclass(frozen=True)
class Ablations(_Group):
    GROUP: ClassVar[str] = "ablations"

    use_clustering: bool = _knob(True, """Match through topic clusters (off: every
        summary node is scored).""")

    use_hierarchy: bool = _knob(True, """Beam search cluster -> summary -> turn
        (off: scan every turn).""")

    use_chains: bool = _knob(True, """Select inside the thread T* with
        thread-local recency (off: select over the whole session, recency in session
        turns).""")

    use_recency: bool = _knob(True, """Recency in the weights and the thread
        choice (off: relevance only).""")

    use_integration: bool = _knob(True, """Merge history passages into the
        context (off: knowledge base only).""")

    use_rewrite: bool = _knob(True, """Query reconstruction and vector expansion
        (off: the raw query).""")

    use_cues: bool = _knob(True, """Read the question's words
        (``algorithm.discourse``): a follow-up that names nothing stays in the latest turn's
        thread unless another is ``follow_up_margin`` more relevant, and is expanded with
        ``follow_up_expansion`` (off: the vectors alone decide, every query expanded with
        ``expansion``).""")

    calibrate: bool = _knob(True, """Centre every vector on the embedder's mean
        direction before comparing (``algorithm.calibration``), so that the thresholds and
        weights above mean the same for any embedder; off: vectors are compared as the
        embedder gives them.""")



@dataclass(frozen=True)
class Experiments(_Group):
    GROUP: ClassVar[str] = "experiments"

    temperature: float = _knob(0.05, """Softmax temperature of the integration
        weights (paper eq. 6): it sets the weights reported with the context, not their order
        (a softmax keeps it).""", low=1e-6, high=100.0)

    history_bonus: float = _knob(0.0, """Integration logit bonus of a history
        passage per unit history weight.""", low=-10.0, high=10.0)

    answer_bonus: float = _knob(0.0, """Further bonus per unit history weight
        and unit similarity between the passage and the answer given with it (the passages
        the answer drew on).""", low=-10.0, high=10.0)

    lexical_length_norm: float = _knob(0.0, """How much the share of
        ``integration.lexical_weight`` is normalised by the candidate's length (BM25's ``b``:
        a long passage holds more words by chance); 0: not at all.""", low=0.0, high=1.0)

    rewrite_vector: bool = _knob(False, """Embed the rewritten query (one more
        encoding) as the base of the expanded query vector, instead of the raw query (on both
        paths: a knowledge base searched by text always gets the rewritten text).""")

    search_raw_query: bool = _knob(False, """The raw query is searched too, as one
        more of the threads' queries (``threads.thread_variants``; a new topic, which no
        thread continues, keeps its own ranking; by text: it re-ranks).""")


_CLASSES: dict[str, type[_Group]] = {
    c.GROUP: c for c in (Limits, Weighting, Tree, Threads, Retrieval, Integration, Ablations,
                         Experiments)}
_GROUP_OF = {k.name: group for group, c in _CLASSES.items() for k in c.knobs()}
"""The group of every knob (names are unique across groups)."""


@dataclass(frozen=True, init=False)
class Settings:
    limits: Limits = field(default_factory=Limits)
    weighting: Weighting = field(default_factory=Weighting)
    tree: Tree = field(default_factory=Tree)
    threads: Threads = field(default_factory=Threads)
    retrieval: Retrieval = field(default_factory=Retrieval)
    integration: Integration = field(default_factory=Integration)
    ablations: Ablations = field(default_factory=Ablations)
    experiments: Experiments = field(default_factory=Experiments)

    if TYPE_CHECKING:
        def __init__(self, *, limits: Limits | None = None, weighting: Weighting | None = None,
                     tree: Tree | None = None, threads: Threads | None = None,
                     retrieval: Retrieval | None = None, integration: Integration | None = None,
                     ablations: Ablations | None = None,
                     experiments: Experiments | None = None) -> None: ...
    else:
        def __init__(self, *, limits=None, weighting=None, tree=None, threads=None,
                     retrieval=None, integration=None, ablations=None, experiments=None,
                     **flat):
            given = {"limits": limits, "weighting": weighting, "tree": tree,
                     "threads": threads, "retrieval": retrieval, "integration": integration,
                     "ablations": ablations, "experiments": experiments}
            for group, cls in _CLASSES.items():
                value = given[group]
                if value is None:
                    value = cls()
                elif not isinstance(value, cls):
                    raise TypeError(f"{group} must be a {cls.__name__}, got "
                                    f"{type(value).__name__}")
                object.__setattr__(self, group, value)
            if flat:
                _refuse_unknown(flat)
                shown = ", ".join(f"{_GROUP_OF[k]}={_CLASSES[_GROUP_OF[k]].__name__}({k}=...)"
                                  for k in flat)
                warnings.warn(f"Settings({', '.join(f'{k}=...' for k in flat)}) is deprecated "
                              f"and goes in the next release: use Settings({shown})",
                              DeprecationWarning, stacklevel=2)
                for group, changes in _by_group(flat).items():
                    object.__setattr__(self, group, replace(getattr(self, group), **changes))
            self.__post_init__()

        def __getattr__(self, name):
            group = _GROUP_OF.get(name)
            if group is None:
                raise AttributeError(f"'Settings' object has no attribute {name!r}")
            warnings.warn(f"settings.{name} is deprecated and goes in the next release: read "
                          f"settings.{group}.{name}", DeprecationWarning, stacklevel=2)
            return getattr(object.__getattribute__(self, group), name)

    def __post_init__(self) -> None:
        k, most = self.retrieval.context_k, self.limits.max_passages
        if k > most:
            raise ValueError(
                f"retrieval.context_k ({k}) exceeds limits.max_passages ({most}): a turn "
                "stores the passages it showed; lower context_k or raise max_passages")

    @classmethod
    def knobs(cls) -> tuple[Knob, ...]:
        """Every knob with its group, description and valid values, group by group."""
        return tuple(k for c in _CLASSES.values() for k in c.knobs())

    def with_(self, **changes: Any) -> Settings:
        """Deprecated (goes in the next release): ``dataclasses.replace`` or
        ``with_changes``."""
        warnings.warn("Settings.with_ is deprecated and goes in the next release: use "
                      "dataclasses.replace(settings, retrieval=Retrieval(...)) or "
                      "dhrag_core.settings.with_changes(settings, {...})",
                      DeprecationWarning, stacklevel=2)
        return with_changes(self, changes)


def _refuse_unknown(names: Mapping[str, Any]) -> None:
    unknown = [n for n in names if n not in _GROUP_OF]
    if unknown:
        raise TypeError(f"unknown setting(s) {unknown}; Settings takes the groups "
                        f"{', '.join(GROUPS)} (Settings.knobs() lists their knobs)")


def _by_group(flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, value in flat.items():
        out.setdefault(_GROUP_OF[name], {})[name] = value
    return out


def _resolve(key: str) -> tuple[str, str]:
    """``(group, knob)`` of a flat knob name or a dotted ``group.knob``; else ``TypeError``."""
    group, _, name = key.rpartition(".")
    if group in _CLASSES and name in {k.name for k in _CLASSES[group].knobs()}:
        return group, name
    if not group and name in _GROUP_OF:
        return _GROUP_OF[name], name
    paths = [k.path for k in Settings.knobs()]
    close = difflib.get_close_matches(key, paths + list(_GROUP_OF), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise TypeError(f"unknown setting {key!r}{hint}: give a knob by name or as group.knob, "
                    f"the groups being {', '.join(GROUPS)} (Settings.knobs() lists them)")


def with_changes(settings: Settings, changes: Mapping[str, Any]) -> Settings:
    """A validated copy of ``settings`` with ``changes`` applied, for tools that take flat
    ``KEY=VALUE`` text: each key a knob's name (``"expansion"``, unique across groups) or its
    dotted path (``"retrieval.expansion"``). An unknown key raises ``TypeError`` naming the
    groups; a bad value raises as the constructor does."""
    by_group: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        group, name = _resolve(key)
        by_group.setdefault(group, {})[name] = value
    groups = {g: replace(getattr(settings, g), **c) for g, c in by_group.items()}
    return replace(settings, **groups)


def _group_doc(cls: type[_Group]) -> str:
    lines = [GROUPS[cls.GROUP].split(": ", 1)[1][:1].upper()
             + GROUPS[cls.GROUP].split(": ", 1)[1][1:] + ".", "", "Attributes:"]
    lines += [f"    {k.name}: {k.doc} Valid: {k.valid()}." for k in cls.knobs()]
    return "\n".join(lines)


def _docstring() -> str:
    lines = ["Knobs of the DH-RAG history database and turn pipeline, one option object per",
             "group: ``Settings(retrieval=Retrieval(expansion=0.5))`` sets one, and",
             "``settings.retrieval.expansion`` reads it.", "",
             "Every similarity a threshold, margin or weight below is compared with is calibrated",
             "(``ablations.calibrate``): unrelated texts near 0, identical ones 1, whatever the",
             "embedder.", "", "Attributes:"]
    for group, title in GROUPS.items():
        lines.append(f"    {group}: ``{_CLASSES[group].__name__}``, {title.split(': ', 1)[1]}: "
                     + ", ".join(k.name for k in _CLASSES[group].knobs()) + ".")
    return "\n".join(lines)


for _cls in _CLASSES.values():
    _cls.__doc__ = _group_doc(_cls)
Settings.__doc__ = _docstring()

#: ``Settings`` under a name that does not clash with LlamaIndex's ``Settings`` in user code.
DHRAGSettings = Settings
