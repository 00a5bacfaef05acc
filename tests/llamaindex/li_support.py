"""What several LlamaIndex tests share."""

from __future__ import annotations

import time

from llama_index.core.chat_engine.types import StreamingAgentChatResponse


def wait_done(reply: StreamingAgentChatResponse) -> None:
    """Wait (10 s at most) until a streamed reply has ended and its history thread is done."""
    deadline = time.monotonic() + 10
    while not reply.is_done and reply.exception is None and time.monotonic() < deadline:
        time.sleep(0.01)
    thread = reply.write_response_to_history_thread
    if thread is not None:
        thread.join(10)
