"""Studies that chose or check a default, each a command of its own.

- ``tune_dhrag``: defaults chosen by cross-validation (``python -m benchmarks.studies.tune_dhrag``).
- ``text_path``: DH-RAG over a knowledge base searched by text only
  (``python -m benchmarks.studies.text_path``).
- ``rewriters``: query rewriters on CANARD (``python -m benchmarks.studies.rewriters``).
- ``data_stats``: what makes MTRAG easier than a deployment
  (``python -m benchmarks.studies.data_stats``).
"""
