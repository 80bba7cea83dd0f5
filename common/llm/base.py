"""The text-model protocol, chat formatting and the checks every backend shares.

A text model maps prompts to continuations:

    texts = model.complete(prompts, max_tokens=N, temperature=T, stop=("\\n\\n",))

Each continuation has at most N tokens of the model's tokenizer and ends before the
earliest occurrence of any stop string (the stop string itself is not returned, as in
the OpenAI completions API). Temperature 0 is greedy decoding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

ROLES = ("system", "user", "assistant")


@runtime_checkable
class TextModel(Protocol):
  """Anything with `complete`: a local checkpoint, an HTTP endpoint, a simulated role."""

  def complete(self, prompts: Sequence[str], *, max_tokens: int, temperature: float = 0.0,
               stop: Sequence[str] = ()) -> list[str]:
    """One continuation per prompt, in order."""


class Completion(NamedTuple):
  """One continuation and what its backend knows of it: `tokens`, the ids it generated
  (the end token included, up to the one that completed a stop string), and
  `finish_reason`, "stop" (the end token or a stop string) or "length" (max_tokens);
  None where the backend cannot tell (a remote or simulated model)."""
  text: str
  tokens: int | None = None
  finish_reason: str | None = None


def generate(text_model: TextModel, prompts: Sequence[str], *, max_tokens: int,
             temperature: float = 0.0, stop: Sequence[str] = ()) -> list[Completion]:
  """`text_model.generate(...)` where it has one (token counts and finish reasons, as
  `LocalTextModel`), else its `complete(...)` texts as `Completion`s without them."""
  kwargs = dict(max_tokens=max_tokens, temperature=temperature, stop=stop)
  if hasattr(text_model, "generate"):
    return list(text_model.generate(prompts, **kwargs))
  return [Completion(text) for text in text_model.complete(prompts, **kwargs)]


class ChatMessage(NamedTuple):
  """One chat turn: `role` is "system", "user" or "assistant"."""
  role: str
  content: str


def _plain(messages: Sequence[ChatMessage]) -> str:
  turns = [f"{m.role.capitalize()}: {m.content}" for m in messages]
  return "\n".join(turns) + "\nAssistant:"


def _chatml(messages: Sequence[ChatMessage]) -> str:
  turns = [f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages]
  return "".join(turns) + "<|im_start|>assistant\n"


CHAT_TEMPLATES = {"plain": _plain, "chatml": _chatml}


def format_chat(messages: Sequence[ChatMessage | tuple[str, str]], template: Any = "plain"
                ) -> str:
  """Chat messages as one prompt, ending where the assistant's reply starts.

  `template` is a name or a checkpoint's own template: "plain": "System: ...\\nUser:
  ...\\nAssistant:" (for base models such as the shared byte LM); "chatml": Qwen's
  "<|im_start|>role\\ncontent<|im_end|>" turns; a `ChatTemplate` (a checkpoint's
  jinja2 template, `HFTokenizer.chat_template`): rendered as transformers'
  `apply_chat_template(messages, add_generation_prompt=True)` renders it.

  Example:
    >>> format_chat([("user", "2 + 2?")])
    'User: 2 + 2?\\nAssistant:'
    >>> format_chat([("user", "2 + 2?")], checkpoint.tokenizer.chat_template)
  """
  if hasattr(template, "render"):
    return template.render(check_messages(messages), add_generation_prompt=True)
  if not isinstance(template, str) or template not in CHAT_TEMPLATES:
    raise ValueError(f"unknown chat template {template!r}; expected one of "
                     f"{sorted(CHAT_TEMPLATES)} or a checkpoint's ChatTemplate")
  return CHAT_TEMPLATES[template](check_messages(messages))


def chat_template_of(text_model: Any, default: str = "plain") -> Any:
  """The chat template a text model's checkpoint carries (`tokenizer.chat_template`), or
  `default` when it has none."""
  template = getattr(getattr(text_model, "tokenizer", None), "chat_template", None)
  return template if template is not None else default


def check_messages(messages: Sequence[ChatMessage | tuple[str, str]]) -> list[ChatMessage]:
  """The messages as `ChatMessage`s; a one-line ValueError naming the first bad one.

  Example:
    >>> check_messages([("user", "hi")])
    [ChatMessage(role='user', content='hi')]
  """
  if isinstance(messages, (str, bytes)):
    raise ValueError("messages must be a sequence of (role, content) pairs, got a string")
  checked = []
  for i, m in enumerate(messages):
    try:
      m = ChatMessage(*m)
    except TypeError:
      raise ValueError(f"messages[{i}] must be a (role, content) pair, got {m!r}") from None
    if m.role not in ROLES or not isinstance(m.content, str):
      raise ValueError(f"messages[{i}] must be (role in {ROLES}, content str), got {m!r}")
    checked.append(m)
  if not checked:
    raise ValueError("messages is empty; expected at least one chat message")
  return checked


def apply_stop(text: str, stop: Sequence[str]) -> str:
  """`text` cut before the earliest occurrence of any stop string.

  Example:
    >>> apply_stop("a.b\\nc", ("\\n", "."))
    'a'
  """
  cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
  return text[:cut]


def check_request(prompts: Sequence[str], max_tokens: int, temperature: float,
                  stop: Sequence[str]) -> list[str]:
  """The prompts as a list; a one-line ValueError naming the bad argument otherwise."""
  if isinstance(prompts, str):
    raise ValueError("prompts must be a sequence of strings, got one str (wrap it in a list)")
  prompts = list(prompts)
  bad = [i for i, p in enumerate(prompts) if not isinstance(p, str)]
  if bad:
    raise ValueError(f"prompts[{bad[0]}] must be a str, got {type(prompts[bad[0]]).__name__}")
  if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
    raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
  if (isinstance(temperature, bool) or not isinstance(temperature, (int, float))
      or not math.isfinite(temperature) or temperature < 0):
    raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got "
                     f"{temperature!r}")
  if isinstance(stop, str) or not all(isinstance(s, str) and s for s in stop):
    raise ValueError(f"stop must be a sequence of non-empty strings, got {stop!r}")
  return prompts
