"""Speed, memory and load: the history work, the knowledge base and workers under load.

Each runs alone (``python -m benchmarks.perf.NAME --help``); their runs are in
docs/performance.md, docs/results/perf/README.md, docs/workers.md and docs/reliability.md.
A throw-away PostgreSQL server for them and the tests is ``dhrag_core.testing``.

- ``history_micro``: the history work alone (``select`` + ``add``) per turn and peak RSS at
  1k-100k triples, against a naive baseline
  (``python -m benchmarks.perf.history_micro [--topics varied] [--embedder numpy]``).
- ``kb_threads``: turn latency with FAISS's default threads against one thread per query
  (``python -m benchmarks.perf.kb_threads [--json F.json]``).
- ``load``: several worker processes over one PostgreSQL history: throughput, tail latency,
  lost turns (``python -m benchmarks.perf.load [--workers 1 2 4]``).
- ``many_sessions``: many users through one process: memory bounded by
  ``max_sessions_in_memory``? (``python -m benchmarks.perf.many_sessions [--sessions N]``).
- ``soak``: one long session, RSS and time per turn sampled
  (``python -m benchmarks.perf.soak [--turns N] [--capacity N]``).
- ``numpy_embedder``: the NumPy MiniLM against the torch one: same vectors, encode speed,
  process memory (``python -m benchmarks.perf.numpy_embedder [--json F.json]``).
"""
