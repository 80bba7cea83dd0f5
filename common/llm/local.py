"""`LocalTextModel`: any checkpoint of the LM stack as a `TextModel`, batched and jitted.

Prompts are encoded, left-padded to a width rounded up to a multiple of `bucket` (so a
handful of compiled programs serve every request), decoded by
`common.models.sampling.generate` (KV cache, per-row stop at the end token), decoded
back to text and cut at the stop strings. A request whose prompt plus `max_tokens`
exceeds the model's context is refused before any work.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from common.llm import base
from common.models import gguf
from common.models import hf
from common.models import sampling
from common.models import zoo
from common.models.transformer import Transformer

END_TOKENS = ("<|im_end|>", "<|endoftext|>", "</s>", "<|end_of_text|>", "<|eot_id|>")


def end_token_id(tokenizer: Any, path: str = "the tokenizer") -> int:
  """The id of the first of `END_TOKENS` the tokenizer knows; a one-line error if none."""
  for token in END_TOKENS:
    token_id = tokenizer.token_to_id(token)
    if token_id is not None:
      return int(token_id)
  raise ValueError(f"{path}: tokenizer.json has none of the end tokens {', '.join(END_TOKENS)}")


def read_checkpoint(path: str | os.PathLike) -> hf.HFCheckpoint:
  """The checkpoint `path` names: a model of `common.models.zoo.NAMED` ("smollm2"), a
  .gguf file (`common.models.gguf.load_gguf`) or a local HF folder
  (`hf.load_hf_checkpoint`)."""
  path = os.fspath(path)
  if path in zoo.NAMED:
    return zoo.load_named(path)
  if path.endswith(".gguf") or os.path.isfile(path):
    return gguf.load_gguf(path)
  return hf.load_hf_checkpoint(path)


def load_checkpoint(path: str | os.PathLike) -> tuple[Transformer, Any, Any, int]:
  """(model, params, tokenizer, end-token id) of a local HF Qwen/Llama folder, a .gguf
  file or a named model ("smollm2"; `read_checkpoint`).

  Raises:
    FileNotFoundError: no tokenizer.json beside the weights (`load_hf_checkpoint`'s
      and `load_gguf`'s errors for the weights and config).
  """
  path = os.fspath(path)
  checkpoint = read_checkpoint(path)
  if checkpoint.tokenizer is None:
    raise FileNotFoundError(f"{path}: no tokenizer.json beside the weights; a text model "
                            "needs the checkpoint's own tokenizer")
  return (Transformer(checkpoint.config), checkpoint.params, checkpoint.tokenizer,
          end_token_id(checkpoint.tokenizer, path))


@functools.partial(jax.jit, static_argnames=("model", "max_new_tokens", "temperature",
                                             "top_p", "eos_id", "pad_id"))
def _generate(model, params, prompts, lengths, key, *, max_new_tokens, temperature, top_p,
              eos_id, pad_id):
  g = sampling.generate(model, params, prompts, key, max_new_tokens=max_new_tokens,
                        temperature=temperature, top_p=top_p, prompt_lengths=lengths,
                        eos_id=eos_id, pad_id=pad_id, return_info=True)
  return g.tokens[:, prompts.shape[1]:], g.lengths


def generate_in_batches(model: Transformer, params: Any, encoded: Sequence[Sequence[int]], *,
                        batch_size: int, width: int, max_new_tokens: int, key: jax.Array,
                        temperature: float = 0.0, top_p: float = 1.0,
                        eos_id: int | None = None, pad_id: int = 0) -> list[list[int]]:
  """The completion ids (the end token included) of every prompt, decoded `batch_size`
  prompts at a time, left-padded to `width`; the last batch is padded with repeats, so
  one compiled program serves every batch. Batch `i * batch_size` samples with
  fold_in(key, i * batch_size).

  Example:
    >>> ids = generate_in_batches(model, params, [[72, 105]], batch_size=8, width=16,
    ...                           max_new_tokens=8, key=jax.random.PRNGKey(0))
  """
  out_ids = []
  for start in range(0, len(encoded), batch_size):
    chunk = [list(ids) for ids in encoded[start:start + batch_size]]
    rows = chunk + [chunk[-1]] * (batch_size - len(chunk))
    prompts, lengths = sampling.pad_prompts(rows, pad_id, width)
    out, n = jax.device_get(_generate(
        model, params, prompts, lengths, jax.random.fold_in(key, start),
        max_new_tokens=max_new_tokens, temperature=float(temperature), top_p=float(top_p),
        eos_id=eos_id, pad_id=pad_id))
    out_ids += [[int(t) for t in row[:length]] for row, length in zip(out[:len(chunk)],
                                                                     n[:len(chunk)])]
  return out_ids


def completion_of(ids: Sequence[int], decode: Callable[[Sequence[int]], str],
                  eos_id: int | None, stop: Sequence[str] = ()) -> base.Completion:
  """One row of generated ids (the end token included, if it came) as a `Completion`.

  The text is `decode` of the ids before the end token, cut before the first stop
  string. `tokens` counts the ids generated up to the end: all of them, or, when a stop
  string cuts the text, those up to the one that completes it (the smallest k whose
  `decode(ids[:k])` holds a stop string; prefixes only grow, so a bisection finds it).
  `finish_reason` is "stop" for the end token or a stop string, else "length".

  Example:
    >>> completion_of([104, 105, 0], lambda ids: bytes(ids).decode(), eos_id=0)
    Completion(text='hi', tokens=3, finish_reason='stop')
  """
  ids = list(ids)
  ended = bool(ids) and eos_id is not None and ids[-1] == eos_id
  body = ids[:-1] if ended else ids
  text = decode(body)
  cut = base.apply_stop(text, stop)
  if len(cut) == len(text):
    return base.Completion(text, len(ids), "stop" if ended else "length")
  lo, hi = 1, len(body)
  while lo < hi:
    mid = (lo + hi) // 2
    prefix = decode(body[:mid])
    if len(base.apply_stop(prefix, stop)) < len(prefix):
      hi = mid
    else:
      lo = mid + 1
  return base.Completion(cut, lo, "stop")


class LocalTextModel:
  """A `TextModel` over a `Transformer` and its tokenizer.

  Args:
    model: the `Transformer`.
    params: its parameters.
    tokenizer: `encode(text) -> ids`, `decode(ids) -> text` (`ByteTokenizer`,
      `HFTokenizer`).
    eos_id: the end token (a row stops after it; it is not returned), or None.
    pad_id: the padding id.
    batch_size: prompts decoded together.
    bucket: prompt widths are rounded up to a multiple of this.
    seed: the sampling seed; call i of `complete` samples with fold_in(PRNGKey(seed), i).

  Example:
    >>> lm = LocalTextModel(trained.model, trained.params, ByteTokenizer(), eos_id=10)
    >>> lm.complete(["def add(a, b):"], max_tokens=32, stop=("\\n\\n",))
  """

  def __init__(self, model: Transformer, params: Any, tokenizer: Any, *,
               eos_id: int | None = None, pad_id: int = 0, batch_size: int = 16,
               bucket: int = 16, seed: int = 0):
    for name, value in (("batch_size", batch_size), ("bucket", bucket)):
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    vocab = model.config.vocab_size
    if eos_id is not None:
      sampling.check_id("eos_id", eos_id, vocab)
    sampling.check_id("pad_id", pad_id, vocab)
    self.model, self.params, self.tokenizer = model, params, tokenizer
    self.eos_id, self.pad_id = eos_id, pad_id
    self.batch_size, self.bucket = batch_size, bucket
    self._key, self._calls = jax.random.PRNGKey(seed), 0

  @classmethod
  def from_checkpoint(cls, path: str | os.PathLike, **kwargs: Any) -> "LocalTextModel":
    """A local HF Qwen/Llama folder (config.json, safetensors, tokenizer.json), a .gguf
    file, or a named model ("smollm2"); see `read_checkpoint`."""
    model, params, tokenizer, eos = load_checkpoint(path)
    return cls(model, params, tokenizer, eos_id=eos, **{"pad_id": eos, **kwargs})

  @property
  def context(self) -> int:
    """The most positions a prompt plus its continuation may use."""
    return self.model.config.max_seq_len

  def _encode(self, prompts: list[str], max_tokens: int) -> list[list[int]]:
    encoded = []
    for i, text in enumerate(prompts):
      ids = list(self.tokenizer.encode(text))
      if not ids:
        raise ValueError(f"prompts[{i}] encodes to no tokens; expected a non-empty prompt")
      if len(ids) + max_tokens > self.context:
        raise ValueError(f"prompts[{i}] has {len(ids)} tokens; with max_tokens={max_tokens} "
                         f"that exceeds the model's context of {self.context}")
      encoded.append(ids)
    return encoded

  def complete(self, prompts: Sequence[str], *, max_tokens: int, temperature: float = 0.0,
               stop: Sequence[str] = (), top_p: float = 1.0) -> list[str]:
    """One continuation per prompt (see `common.llm.base`)."""
    return [c.text for c in self.generate(prompts, max_tokens=max_tokens,
                                          temperature=temperature, stop=stop, top_p=top_p)]

  def generate(self, prompts: Sequence[str], *, max_tokens: int, temperature: float = 0.0,
               stop: Sequence[str] = (), top_p: float = 1.0) -> list[base.Completion]:
    """`complete`'s continuations with their token counts and finish reasons
    (`base.Completion`): what the server reports as usage.completion_tokens."""
    prompts = base.check_request(prompts, max_tokens, temperature, stop)
    encoded = self._encode(prompts, max_tokens)
    key = jax.random.fold_in(self._key, self._calls)
    self._calls += 1
    longest = max(len(ids) for ids in encoded)
    width = min(-(-longest // self.bucket) * self.bucket, self.context - max_tokens)
    completions = generate_in_batches(
        self.model, self.params, encoded, batch_size=self.batch_size, width=width,
        max_new_tokens=max_tokens, key=key, temperature=temperature, top_p=top_p,
        eos_id=self.eos_id, pad_id=self.pad_id)

    def decode(ids):
      return self.tokenizer.decode(np.asarray(ids, np.int64))

    return [completion_of(ids, decode, self.eos_id, stop) for ids in completions]
