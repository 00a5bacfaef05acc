"""Applications on top of the pipeline: chat, the ``dhrag`` command line, the demo, knowledge
base ingestion and answering. Nothing in the library imports from here."""

__all__: list[str] = []
