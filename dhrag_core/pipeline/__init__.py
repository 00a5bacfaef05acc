"""The turn pipeline: a knowledge base and the history database put together (``DHRAG``)."""

__all__: list[str] = []
