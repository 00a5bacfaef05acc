"""Analyses of the engine: one-off questions about DH-RAG, answered on MTRAG and the scenarios.

Not systems of the harness: each replays the real engine (``benchmarks.harness.dhrag_systems``) and
plugs into the core's policies or reads it through its public views, never patching it (a test
checks). Their runs and findings are in docs/results/threads/README.md and docs/mtrag_results.md.

- ``thread_choice``: how often content alone guesses a turn's true thread, and what the wrong
  guesses cost (``python -m benchmarks.analyses.thread_choice [--out F.json]``).
- ``thread_gap``: where dhrag loses to the thread oracle on interleaved sessions: grouping,
  choice of T*, hedge, or the rest (``python -m benchmarks.analyses.thread_gap [--threads 10]``).
- ``thread_judge``: what a judge of the thread (an LLM asked which topic a question continues)
  could at best bring, simulated with the data's labels
  (``python -m benchmarks.analyses.thread_judge [--accuracy 1,0.9,0.8]``).
- ``choice_ceiling``: a learned ceiling on choosing T* from a bi-encoder's signals
  (``python -m benchmarks.analyses.choice_ceiling [--threads 3,10]``).
- ``thread_tracking``: the earlier turn dhrag ranks first against the data's topic labels
  (``python -m benchmarks.analyses.thread_tracking [--scenarios DIR]``).
- ``clarity_split``: MRR@10 by how clearly the question alone finds a passage (why the clarity
  gate; ``python -m benchmarks.analyses.clarity_split [--threads 3]``).
- ``fit_integration``: whether a fitted integration matrix W beats the identity, cross-validated
  (``python -m benchmarks.analyses.fit_integration``).
- ``topic_vector_candidates``: a plug-in registering the topic-vector candidates of the
  embedder issue as systems (``python -m benchmarks run --import
  benchmarks.analyses.topic_vector_candidates --systems 'dhrag,dhrag-cand*' ...``).
- ``clarification_variants``: a plug-in registering one-part variants of dhrag for the
  clarification gap (``--import benchmarks.analyses.clarification_variants --systems
  'dhrag,dhrag-clar-*'``).
"""
