"""Benchmarks for dhrag: the conversational retrieval harness, and by kind what runs beside it.

At the top, the retrieval harness (``python -m benchmarks --help``) and what several kinds share:

- ``__main__``: the command line (``convert``, ``interleave``, ``run``, ``list``).
- ``data``: the neutral format (``kb.jsonl``, ``tasks.jsonl``) and its loaders.
- ``convert_mtrag``: MTRAG -> neutral format.
- ``interleave``: long sessions of interleaved conversations (topic switches and returns).
- ``kbcache``: KB embeddings cached on disk by model and content.
- ``embedders``: a second real embedder (all-mpnet-base-v2) and a shift of the cosine scale.
- ``sparse``: a BM25 retriever, the second retriever.
- ``replay``: the ``System`` protocol and the causal replay.
- ``systems``: baseline systems and the registry (``register_system``).
- ``dhrag_systems``: DH-RAG systems (the real engine) and its ablations.
- ``adapter_systems``: DH-RAG through the LangChain and LlamaIndex adapters
  (``python -m benchmarks run --import benchmarks.adapter_systems``).
- ``metrics``: Recall, MRR, nDCG, splits, paired randomisation test.
- ``crossval``: folds by conversation, the tuning and report halves, grid values.
- ``runner`` / ``report``: one run, and its markdown / JSON / PNG report.
- ``paths``: where the data and caches live; ``mtrag_kb``: the converted MTRAG and its FAISS
  knowledge base, as the analyses load them; ``pg_server``: a throw-away PostgreSQL server
  (tests, examples, ``perf``).
- ``tune_dhrag``: defaults chosen by cross-validation (``python -m benchmarks.tune_dhrag``).
- ``text_path``: DH-RAG over a knowledge base searched by text only
  (``python -m benchmarks.text_path``).
- ``rewriters``: query rewriters on CANARD (``python -m benchmarks.rewriters``).
- ``data_stats``: what makes MTRAG easier than a deployment (``python -m benchmarks.data_stats``).
- ``hostile_table``: hostile input through every public door, tabulated
  (``python -m benchmarks.hostile_table``; docs/reliability_inputs.md).
- ``readme_tables``: the README's and docs' tables rendered from the run JSON
  (``python -m benchmarks.readme_tables --write``).

Beside it, by kind (each package's docstring lists its modules and their commands):

- ``analyses``: one-off analyses of the engine (thread choice, the gap to the thread oracle, a
  judge of the thread, the clarity gate, a fitted integration matrix).
- ``perf``: speed, memory and load (the history work, FAISS threads, workers on PostgreSQL,
  many sessions, soak, the NumPy embedder).

The hand-written topic-switch scenarios are data, in ``scenarios/`` (``--bench
benchmarks/scenarios``).
"""
