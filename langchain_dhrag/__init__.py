"""LangChain adapter for dhrag (retriever, memory, agent middleware) -- not yet released.

The adapter classes land with the framework-integration work; this package exists so the
distribution layout is final and ``pip install dhrag[langchain]`` resolves today.
"""

__all__: list[str] = []
