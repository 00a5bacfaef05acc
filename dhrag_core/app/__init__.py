"""Applications on top of the pipeline: chat (``chat``, ``chat_cli``), the ``dhrag`` command
line (``cli``), the scripted demo and the offline answerer. The library imports nothing from
here."""

__all__: list[str] = []
