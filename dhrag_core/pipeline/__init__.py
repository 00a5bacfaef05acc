"""The turn pipeline (``DHRAG``): the knowledge base and the history database put together."""

__all__: list[str] = []
