"""LlamaIndex adapter for dhrag (chat engine, memory block, retriever) -- not yet released.

The adapter classes land with the framework-integration work; this package exists so the
distribution layout is final and ``pip install dhrag[llamaindex]`` resolves today.
"""

__all__: list[str] = []
