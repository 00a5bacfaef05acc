"""Benchmarks for dhrag: the conversational retrieval harness and micro-benchmarks.

Modules of the retrieval harness (``python -m benchmarks --help``):

- ``data``: the neutral format (``kb.jsonl``, ``tasks.jsonl``) and its loaders.
- ``convert_mtrag``: MTRAG -> neutral format.
- ``kbcache``: KB embeddings cached on disk by model and content.
- ``replay``: the ``System`` protocol and the causal replay.
- ``systems``: baseline systems and the registry (``register_system``).
- ``metrics``: Recall, MRR, nDCG, splits, paired randomisation test.
- ``runner`` / ``report``: one run, and its markdown / JSON / PNG report.
"""
