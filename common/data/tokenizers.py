"""Tokenizers with one interface: `encode(text) -> list[int]`, `decode(ids) -> str`, `vocab_size`.

- `ByteTokenizer`: UTF-8 bytes are the tokens (vocabulary 256), for models trained
  here; every string round-trips exactly.
- `HFTokenizer`: a Hugging Face `tokenizer.json` read from a local path through the
  `tokenizers` package (the format every HF checkpoint ships; its chat template and
  special tokens from tokenizer_config.json beside it), or a `tokenizers.Tokenizer`
  built in memory (`HFTokenizer.from_tokenizer`, e.g. from a GGUF file's metadata);
  nothing is downloaded. `save(folder)` writes both files back.
- `ChatTemplate`: a checkpoint's jinja2 chat template, rendered as transformers'
  `apply_chat_template` renders it.

Example:
    >>> tok = ByteTokenizer()
    >>> tok.decode(tok.encode("héllo")) == "héllo"
    True
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np


class ByteTokenizer:
  """Bytes as tokens: encode = list(text.encode("utf-8")), vocab_size = 256."""

  vocab_size = 256

  def encode(self, text: str) -> list[int]:
    return list(text.encode("utf-8"))

  def encode_array(self, text: str) -> np.ndarray:
    """The byte ids as a uint8 array (no Python list for long texts)."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)

  def decode(self, ids: Sequence[int]) -> str:
    ids = _check_ids(ids, self.vocab_size)
    return bytes(ids.astype(np.uint8).tolist()).decode("utf-8", errors="replace")


def _check_ids(ids: Sequence[int], vocab_size: int) -> np.ndarray:
  """`ids` as a 1-D int64 array; one-line errors for non-integer ids (1.7 would be
  truncated to 1) and for ids outside 0..vocab_size-1 (naming the first bad index)."""
  array = np.asarray(ids)
  if array.ndim != 1:
    raise ValueError(f"ids has shape {array.shape}; expected a 1-D sequence of token ids")
  if array.size and not np.issubdtype(array.dtype, np.integer):
    raise TypeError(f"ids has dtype {array.dtype}; expected integer token ids")
  array = array.astype(np.int64)
  bad = np.flatnonzero((array < 0) | (array >= vocab_size))
  if bad.size:
    raise ValueError(f"ids[{bad[0]}]={array[bad[0]]} is outside the vocabulary; expected ids "
                     f"in 0..{vocab_size - 1}")
  return array


@functools.lru_cache(maxsize=16)
def _compile_template(source: str):
  """The jinja2 template in transformers' environment: sandboxed, trim_blocks and
  lstrip_blocks, loop controls, `raise_exception`, `strftime_now` and a `tojson` that
  does not escape HTML."""
  import datetime

  import jinja2
  from jinja2 import ext, sandbox

  def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

  def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)

  env = sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                              extensions=[ext.loopcontrols])
  env.filters["tojson"] = tojson
  env.globals["raise_exception"] = raise_exception
  env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
  return env.from_string(source)


class ChatTemplate(NamedTuple):
  """A checkpoint's chat template (jinja2 source) and the special tokens it may use
  (bos_token, eos_token, ...)."""
  source: str
  special_tokens: Mapping[str, str] = {}

  def render(self, messages: Sequence[Any], add_generation_prompt: bool = True) -> str:
    """The prompt `source` renders for `messages` ((role, content) pairs or dicts), as
    transformers' `apply_chat_template(..., tokenize=False)` gives it.

    Example:
      >>> ChatTemplate("{% for m in messages %}{{ m['content'] }}{% endfor %}").render(
      ...     [("user", "hi")])
      'hi'
    """
    turns = [dict(m) if isinstance(m, Mapping) else {"role": m[0], "content": m[1]}
             for m in messages]
    import jinja2

    try:
      return _compile_template(self.source).render(
          messages=turns, add_generation_prompt=add_generation_prompt,
          **dict(self.special_tokens))
    except jinja2.TemplateError as e:
      raise ValueError(f"the chat template failed: {e}") from None


class HFTokenizer:
  """A `tokenizers.Tokenizer` loaded from a tokenizer.json file.

  Attributes:
    path: where it came from (the tokenizer.json, or the source `from_tokenizer` names).
    chat_template: a `ChatTemplate`, or None (from tokenizer_config.json's
      "chat_template" when the file is there).
    special_tokens: {"bos_token": ..., "eos_token": ..., ...} from tokenizer_config.json.
    add_bos: whether the model expects a BOS token first (tokenizer_config.json's
      "add_bos_token"); `encode(text, add_special_tokens=True)` adds it.
  """

  def __init__(self, path: str | os.PathLike):
    path = os.fspath(path)
    if os.path.isdir(path):
      path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
      raise FileNotFoundError(f"no tokenizer.json at {path!r}")
    import tokenizers  # Lazy: only users of real checkpoints need it.

    try:
      tok = tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # The tokenizers package raises a bare Exception without the path.
      raise ValueError(f"{path} is not a readable tokenizer.json ({e}); expected a Hugging "
                       f"Face tokenizers JSON file") from None
    self._set(tok, path, *_read_tokenizer_config(os.path.dirname(path)))

  def _set(self, tok: Any, path: str, chat_template: str | None,
           special_tokens: Mapping[str, str], add_bos: bool) -> None:
    self._tok, self.path = tok, path
    self.special_tokens = {k: v for k, v in dict(special_tokens).items() if isinstance(v, str)}
    self.chat_template = (ChatTemplate(chat_template, self.special_tokens)
                          if chat_template else None)
    self.add_bos = bool(add_bos)

  @classmethod
  def from_tokenizer(cls, tokenizer: Any, *, source: str, chat_template: str | None = None,
                     special_tokens: Mapping[str, str] | None = None,
                     add_bos: bool = False) -> "HFTokenizer":
    """Wraps a `tokenizers.Tokenizer` built in memory; `source` names it in errors.

    Example:
      >>> tok = HFTokenizer.from_tokenizer(tokenizers.Tokenizer(models.BPE()), source="mem")
    """
    self = cls.__new__(cls)
    self._set(tokenizer, source, chat_template, special_tokens or {}, add_bos)
    return self

  @property
  def vocab_size(self) -> int:
    return self._tok.get_vocab_size(with_added_tokens=True)

  @property
  def backend(self) -> Any:
    """The underlying `tokenizers.Tokenizer`."""
    return self._tok

  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
    """Token ids of `text`; `add_special_tokens=True` adds BOS when `add_bos`."""
    return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

  def decode(self, ids: Sequence[int]) -> str:
    ids = _check_ids(ids, self.vocab_size)
    return self._tok.decode(ids.tolist(), skip_special_tokens=False)

  def token_to_id(self, token: str) -> int | None:
    return self._tok.token_to_id(token)

  def save(self, folder: str | os.PathLike) -> str:
    """Writes folder/tokenizer.json and folder/tokenizer_config.json (chat template,
    special tokens, add_bos_token), atomically; returns the tokenizer.json path."""
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "tokenizer.json")
    config = os.path.join(folder, "tokenizer_config.json")
    from common import trials  # pylint: disable=g-import-not-at-top

    self._tok.save(path + ".tmp")
    body = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": self.add_bos,
            **self.special_tokens}
    if self.chat_template is not None:
      body["chat_template"] = self.chat_template.source
    os.replace(path + ".tmp", path)
    trials.atomic_write_bytes(config, json.dumps(body, indent=2, ensure_ascii=False).encode())
    return path


def _read_tokenizer_config(folder: str) -> tuple[str | None, dict[str, str], bool]:
  """(chat_template, special tokens, add_bos_token) of folder/tokenizer_config.json;
  (None, {}, False) without the file."""
  path = os.path.join(folder, "tokenizer_config.json")
  if not os.path.isfile(path):
    return None, {}, False
  try:
    with open(path, encoding="utf-8") as f:
      body = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{path} is not valid JSON ({e}); expected the tokenizer's settings") from None
  if not isinstance(body, dict):
    raise ValueError(f"{path} holds a JSON {type(body).__name__}; expected an object")
  template = body.get("chat_template")
  if template is not None and not isinstance(template, str):
    raise ValueError(f"{path} chat_template is a {type(template).__name__}; expected a "
                     "jinja2 string (named templates are not supported)")
  special = {k: _token_text(body[k]) for k in ("bos_token", "eos_token", "unk_token", "pad_token")
             if body.get(k) is not None}
  return template, special, bool(body.get("add_bos_token", False))


def _token_text(token: Any) -> Any:
  """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
  return token.get("content") if isinstance(token, dict) else token


def load_tokenizer(path: str | os.PathLike) -> HFTokenizer:
  """Reads `path/tokenizer.json` (or the file `path`)."""
  return HFTokenizer(path)


def save_byte_tokenizer(folder: str | os.PathLike, end_id: int = 10) -> str:
  """Writes `folder/tokenizer.json` for the byte-level LMs trained here, so that an export
  (`common.models.hf.save_hf_checkpoint`) is a complete Hugging Face folder that
  `common.llm.LocalTextModel.from_checkpoint` and `experiments.serve_lm` can open.

  Character U+0000..U+00FF is token id = its code point, one token per character, so
  ASCII text encodes exactly as `ByteTokenizer`; other characters become id 0. The byte
  LM has no spare id, so the character `end_id` (default 10, the newline, where a
  generated line ends) is the end token "<|endoftext|>" instead: text cannot encode it
  (it becomes id 0), and decoding it gives "<|endoftext|>".

  Returns:
    The path of the tokenizer.json.

  Example:
    >>> hf.save_hf_checkpoint(folder, trained.params, trained.model.config)
    >>> save_byte_tokenizer(folder)
  """
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers

  if isinstance(end_id, bool) or not isinstance(end_id, int) or not 0 < end_id < 256:
    raise ValueError(f"end_id must be an int in 1..255, got {end_id!r}")
  vocab = {chr(i): i for i in range(256) if i != end_id}
  vocab["<|endoftext|>"] = end_id
  tok = Tokenizer(models.WordLevel(vocab, unk_token=chr(0)))
  tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
  tok.decoder = decoders.Fuse()
  path = os.path.join(os.fspath(folder), "tokenizer.json")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tok.save(path + ".tmp")
  os.replace(path + ".tmp", path)
  return path
