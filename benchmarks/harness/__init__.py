"""The conversational retrieval harness behind ``python -m benchmarks``.

- ``data``: the neutral format (``kb.jsonl``, ``tasks.jsonl``) and its loaders.
- ``convert_mtrag``: MTRAG -> neutral format; ``mtrag_kb``: the converted MTRAG and its FAISS
  knowledge base, as the analyses load them.
- ``interleave``: long sessions of interleaved conversations (topic switches and returns).
- ``kbcache``: KB embeddings cached on disk by model and content.
- ``embedders``: a second real embedder (all-mpnet-base-v2) and a shift of the cosine scale.
- ``sparse``: a BM25 retriever, the second retriever.
- ``replay``: the ``System`` protocol and the causal replay.
- ``systems``: baseline systems and the registry (``register_system``).
- ``dhrag_systems``: DH-RAG systems (the real engine) and its ablations.
- ``adapter_systems``: DH-RAG through the LangChain and LlamaIndex adapters
  (``python -m benchmarks run --import benchmarks.harness.adapter_systems``).
- ``metrics``: Recall, MRR, nDCG, splits, paired randomisation test.
- ``crossval``: folds by conversation, the tuning and report halves, grid values.
- ``runner`` / ``report``: one run, and its markdown / JSON / PNG report.
- ``topic_selection``: history selection on TopiOCQA's human topic labels
  (``python -m benchmarks topics``).
- ``paths``: where the data and caches live; ``rss``: peak memory of a process.
"""
