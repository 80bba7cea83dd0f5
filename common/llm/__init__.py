"""Text models behind one interface, for the methods that put an LLM in the loop.

`TextModel` is the protocol (`complete(prompts, max_tokens=, temperature=, stop=)`);
`LocalTextModel` runs any checkpoint of the LM stack with the jitted cached sampler;
`HTTPTextModel` reaches any OpenAI-compatible server; `text_model_from_spec` picks one
from a string ("http://...", "hf:/path", "hf:/file.gguf", "smollm2"); `format_chat` turns
chat messages into one prompt string (plain, ChatML, or the checkpoint's own jinja2
template: `chat_template_of(text_model)`). Our own server is `common.llm.server`
(`make_app`, `serving`, ...; on the
command line `python -m experiments.serve_lm`): import it as a submodule, since it is not
re-exported here, so that `import common.llm` does not load fastapi. See docs/llm.md.
"""

from common.llm.base import (CHAT_TEMPLATES, ChatMessage, Completion, TextModel, apply_stop,
                             chat_template_of, check_messages, check_request, format_chat)
from common.llm.http import HTTPTextModel, TextModelError
from common.llm.local import (LocalTextModel, end_token_id, generate_in_batches,
                              load_checkpoint)
from common.llm.spec import SPEC_FORMS, check_spec, spec_kwargs, text_model_from_spec

__all__ = ["CHAT_TEMPLATES", "ChatMessage", "Completion", "HTTPTextModel", "LocalTextModel", "SPEC_FORMS",
           "TextModel", "TextModelError", "apply_stop", "chat_template_of", "check_messages",
           "check_request",
           "check_spec", "end_token_id", "format_chat", "generate_in_batches",
           "load_checkpoint", "spec_kwargs", "text_model_from_spec"]
