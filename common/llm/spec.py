"""`text_model_from_spec`: a text model named by one string, as configs and flags give it.

    http://HOST:PORT/v1 or https://...   -> HTTPTextModel (any OpenAI-compatible server)
    hf:/path/to/checkpoint               -> LocalTextModel.from_checkpoint (a local HF folder)
"""

from __future__ import annotations

from typing import Any

from common.llm import base
from common.llm.http import HTTPTextModel
from common.llm.local import LocalTextModel

SPEC_FORMS = ("http://HOST:PORT/v1", "https://HOST/v1", "hf:/path/to/checkpoint")


def text_model_from_spec(spec: str, **kwargs: Any) -> base.TextModel:
  """The `TextModel` a spec string names; `kwargs` go to its constructor.

  Args:
    spec: "http://..." or "https://..." (an OpenAI-compatible API root) or "hf:PATH" (a
      local Hugging Face Qwen/Llama folder with its tokenizer.json).
    **kwargs: e.g. `timeout=`, `endpoint=` for HTTP; `batch_size=` for a checkpoint.

  Raises:
    ValueError: any other spec (one line listing the accepted forms).

  Example:
    >>> lm = text_model_from_spec("http://127.0.0.1:8000/v1", max_retries=1)
    >>> lm = text_model_from_spec("hf:/models/Qwen3-0.6B", batch_size=8)
  """
  if isinstance(spec, str) and spec.startswith(("http://", "https://")):
    return HTTPTextModel(spec, **kwargs)
  if isinstance(spec, str) and spec.startswith("hf:") and spec[3:].strip():
    return LocalTextModel.from_checkpoint(spec[3:], **kwargs)
  raise ValueError(f"text model spec {spec!r} is not recognised; expected one of "
                   f"{', '.join(SPEC_FORMS)}")
