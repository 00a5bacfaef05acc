"""Benchmarks for dhrag, by kind (``python -m benchmarks --help`` is the command line).

- ``harness``: the conversational retrieval harness: the neutral data format and MTRAG's
  conversion, interleaved sessions, the KB cache, embedders, the systems and their registry,
  the causal replay, metrics, folds by conversation, one run and its report, TopiOCQA's topic
  selection.
- ``studies``: what chose or checks a default: ``tune_dhrag`` (cross-validation), ``text_path``
  (a knowledge base searched by text only), ``rewriters`` (CANARD), ``data_stats``.
- ``analyses``: one-off analyses of the engine (thread choice and tracking, the gap to the
  thread oracle, the return ceiling, the clarity gate, a fitted integration matrix).
- ``perf``: speed, memory and load (history work, FAISS threads, workers on PostgreSQL, many
  sessions, soak, the NumPy embedder, the first turn).
- ``tools``: what renders the docs from the runs (``readme_tables``, ``hostile_table``).
- ``scenarios``: data, the hand-written topic-switch set (``--bench benchmarks/scenarios``).

Each package's docstring lists its modules and their commands.
"""
