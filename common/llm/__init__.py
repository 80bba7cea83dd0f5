"""Text models behind one interface, for the methods that put an LLM in the loop.

`TextModel` is the protocol (`complete(prompts, max_tokens=, temperature=, stop=)`);
`LocalTextModel` runs any checkpoint of the LM stack with the jitted cached sampler;
`format_chat` turns chat messages into one prompt string.
"""

from common.llm.base import (CHAT_TEMPLATES, ChatMessage, TextModel, apply_stop,
                             check_request, format_chat)
from common.llm.local import (LocalTextModel, end_token_id, generate_in_batches,
                              load_checkpoint)

__all__ = ["CHAT_TEMPLATES", "ChatMessage", "LocalTextModel", "TextModel", "apply_stop",
           "check_request", "end_token_id", "format_chat", "generate_in_batches",
           "load_checkpoint"]
