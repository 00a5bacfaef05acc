"""The DH-RAG algorithm: pure scoring, topic clusters, chains, the summary tree, rewriting and
integration. Depends only on the foundation modules (records, settings, embedding, index)."""

__all__: list[str] = []
