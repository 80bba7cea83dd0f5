"""Tokenizers with one interface: `encode(text) -> list[int]`, `decode(ids) -> str`, `vocab_size`.

- `ByteTokenizer`: UTF-8 bytes are the tokens (vocabulary 256), for models trained
  here; every string round-trips exactly.
- `HFTokenizer`: a Hugging Face `tokenizer.json` read from a local path through the
  `tokenizers` package (the format every HF checkpoint ships); nothing is downloaded.

Example:
    >>> tok = ByteTokenizer()
    >>> tok.decode(tok.encode("héllo")) == "héllo"
    True
"""

from __future__ import annotations

import os
from collections.abc import Sequence

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


class HFTokenizer:
  """A `tokenizers.Tokenizer` loaded from a tokenizer.json file."""

  def __init__(self, path: str | os.PathLike):
    path = os.fspath(path)
    if os.path.isdir(path):
      path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
      raise FileNotFoundError(f"no tokenizer.json at {path!r}")
    import tokenizers  # Lazy: only users of real checkpoints need it.

    self.path = path
    try:
      self._tok = tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # The tokenizers package raises a bare Exception without the path.
      raise ValueError(f"{path} is not a readable tokenizer.json ({e}); expected a Hugging "
                       f"Face tokenizers JSON file") from None

  @property
  def vocab_size(self) -> int:
    return self._tok.get_vocab_size(with_added_tokens=True)

  def encode(self, text: str) -> list[int]:
    return self._tok.encode(text, add_special_tokens=False).ids

  def decode(self, ids: Sequence[int]) -> str:
    ids = _check_ids(ids, self.vocab_size)
    return self._tok.decode(ids.tolist(), skip_special_tokens=False)

  def token_to_id(self, token: str) -> int | None:
    return self._tok.token_to_id(token)


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
