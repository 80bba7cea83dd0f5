"""GGUF checkpoints (llama.cpp's single-file format) -> the checkpoint `hf.py` returns.

`load_gguf(path)` reads one .gguf file with the `gguf` package and returns the same
`HFCheckpoint(config, params, tokenizer, model_type)` as `hf.load_hf_checkpoint`, so
everything that takes a checkpoint (`LocalTextModel`, the server, `save_hf_checkpoint`)
takes a GGUF file too:

- the weights: every tensor type that `gguf.quants.dequantize` supports (F32, F16,
  BF16, Q4_0/1, Q5_0/1, Q8_0, the K- and I-quants, ...) is dequantized to float32
  (bfloat16 on request). GGUF stores a linear layer as HF does, (out, in) rows; ours is
  the kernel (in, out), so each is transposed. llama.cpp's converter permutes the rows
  of the Q and K projections from HF's half-split rotary layout to its interleaved one,

      W_gguf = W_hf.reshape(h, 2, d/2, D).swapaxes(1, 2).reshape(h d, D)

  (h the query heads for Q, the KV heads for K; d the head width), and `_unpermute`
  applies the inverse, W_hf = W_gguf.reshape(h, d/2, 2, D).swapaxes(1, 2).reshape(h d, D),
  so that `apply_rope`'s half-split rotation is the right one.
- the config: `{arch}.block_count`, `.embedding_length`, `.feed_forward_length`,
  `.attention.head_count(_kv)`, `.attention.key_length` (head width),
  `.rope.freq_base`, `.rope.dimension_count`, `.rope.scaling.*`,
  `.attention.layer_norm_rms_epsilon`, `.context_length`, the vocabulary, and tied
  embeddings when the file has no `output.weight`.
- the tokenizer: byte-level BPE built with the `tokenizers` library from the
  `tokenizer.ggml.*` metadata (`tokenizer_from_gguf`), wrapped in `HFTokenizer` with
  the file's chat template.

Anything else (another architecture, a tensor type the `gguf` package cannot
dequantize, a missing key, a truncated file) is a one-line ValueError that names the
file and the key.

Example:
    >>> ckpt = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    >>> logits = Transformer(ckpt.config).apply({"params": ckpt.params}, tokens)
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import jax.numpy as jnp
import numpy as np

from common.data.tokenizers import HFTokenizer
from common.models import hf
from common.models.transformer import RopeScaling, TransformerConfig

ARCHITECTURES = ("llama",)
# llama.cpp's `tokenizer.ggml.pre` names whose split rule is GPT-2's regex, optionally
# after splitting every digit off on its own (llama-vocab.cpp's pre-tokenizer table).
GPT2_PRE_TOKENIZERS = ("default", "gpt2", "gpt-2")
DIGIT_SPLIT_PRE_TOKENIZERS = ("smollm",)
# llama_token_type: 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte.
_CONTROL, _USER_DEFINED = 3, 4


def _key_error(path: str, key: str, what: str) -> ValueError:
  return ValueError(f"{path}: GGUF key {key!r} {what}")


def _open(path: str):
  """A `gguf.GGUFReader` over the file; one-line errors for a missing, truncated or
  corrupt file (the tensor whose data runs past the end is named)."""
  import gguf  # Lazy: only users of GGUF files need it.

  if not os.path.isfile(path):
    raise FileNotFoundError(f"GGUF file {path!r} does not exist")
  try:
    reader = _reader_class(gguf.GGUFReader)(path)
  except Exception as e:  # The reader's errors (struct, reshape, magic) do not name the file.
    raise ValueError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e}); "
                     f"expected a complete GGUF file (truncated or corrupt?)") from None
  size = os.path.getsize(path)
  for t in reader.tensors:
    if t.data_offset + t.n_bytes > size:
      raise ValueError(f"{path}: tensor {t.name!r} ends at byte {t.data_offset + t.n_bytes} "
                       f"but the file has {size} bytes (truncated?)")
  return reader


@functools.cache
def _reader_class(base: type) -> type:
  """`base` (`gguf.GGUFReader`) with its metadata arrays parsed by `_array_parts`.

  The parent class reads a 49k-entry token list element by element through `np.memmap`
  slices (about 3 s of the SmolLM2 load); this subclass builds the same fields (names,
  parts, data indices, types) and the same tensors from plain NumPy views of the file.
  Any field that `_array_parts` does not handle (a scalar, a string, an array of
  arrays, a file of the other byte order) goes to the parent's parser.
  """

  class Reader(base):
    """`gguf.GGUFReader` with one-pass array fields (`_array_parts`)."""

    def _get_field_parts(self, orig_offs, raw_type):  # pylint: disable=arguments-renamed
      parts = _array_parts(self, int(orig_offs), int(raw_type))
      return super()._get_field_parts(orig_offs, raw_type) if parts is None else parts

  return Reader


def _array_parts(reader, offs: int, raw_type: int):
  """`GGUFReader._get_field_parts` for an array of strings or of scalars, or None for
  any other field: (size in bytes, parts, data indices, types), where the parts are
  [item type, length] and then, per item, [string length, string bytes] or [value]."""
  from gguf import GGUFValueType

  if raw_type != GGUFValueType.ARRAY or reader.byte_order != "I":
    return None
  data = reader.data.view(np.ndarray)
  item_type = data[offs:offs + 4].view(np.uint32)
  count = data[offs + 4:offs + 12].view(np.uint64)
  kind, n = GGUFValueType(int(item_type[0])), int(count[0])
  if kind == GGUFValueType.STRING:
    items = _string_items(data, offs + 12, n)
  elif kind in reader.gguf_scalar_to_np:
    itemsize = np.dtype(reader.gguf_scalar_to_np[kind]).itemsize
    if offs + 12 + n * itemsize > data.size:
      raise ValueError(f"an array of {n} {kind.name} values runs past the end of the file")
    values = data[offs + 12:offs + 12 + n * itemsize].view(reader.gguf_scalar_to_np[kind])
    items = [values[i:i + 1] for i in range(n)]
  else:
    return None
  per_item = 2 if kind == GGUFValueType.STRING else 1
  indices = list(range(1 + per_item, 2 + per_item * n, per_item))
  size = 12 + sum(int(part.nbytes) for part in items)
  return size, [item_type, count, *items], indices, [GGUFValueType.ARRAY] + [kind] * (n > 0)


def _string_items(data: np.ndarray, offs: int, n: int) -> list[np.ndarray]:
  """[length (uint64), utf-8 bytes (uint8)] of each of the `n` strings from `offs`."""
  raw, items = memoryview(data), []
  for _ in range(n):
    length = int.from_bytes(raw[offs:offs + 8], sys.byteorder)
    if offs + 8 + length > data.size:
      raise ValueError(f"a string array of {n} entries runs past the end of the file")
    items += [data[offs:offs + 8].view(np.uint64), data[offs + 8:offs + 8 + length]]
    offs += 8 + length
  return items


def _value(reader, path: str, key: str, default: Any = ...) -> Any:
  """The metadata value at `key` (a scalar, str or list); a one-line error naming the
  file and the key when it is missing and no default is given."""
  field = reader.fields.get(key)
  if field is None:
    if default is ...:
      raise _key_error(path, key, "is missing")
    return default
  try:
    return field.contents()
  except Exception as e:  # pylint: disable=broad-except
    raise _key_error(path, key, f"is unreadable ({e})") from None


def _positive_int(reader, path: str, key: str, default: Any = ...) -> int | None:
  value = _value(reader, path, key, default)
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
    raise _key_error(path, key, f"is {value!r}; expected a positive integer")
  return int(value)


def _float32(value: float) -> float:
  """The shortest decimal of a float32 metadata value (1e-05, not 9.9999997e-06)."""
  return float(str(np.float32(value)))


def _rope_scaling(reader, path: str, arch: str) -> RopeScaling:
  """`{arch}.rope.scaling.type` / `.factor` as our `RopeScaling` (none or linear)."""
  key = f"{arch}.rope.scaling.type"
  kind = _value(reader, path, key, "none")
  if kind == "none":
    return RopeScaling()
  if kind != "linear":
    raise _key_error(path, key, f"is {kind!r}; supported: none, linear")
  factor = float(_value(reader, path, f"{arch}.rope.scaling.factor"))
  if not factor > 0:
    raise _key_error(path, f"{arch}.rope.scaling.factor", f"is {factor!r}; expected > 0")
  return RopeScaling(kind="linear", factor=factor)


def config_from_gguf(reader, path: str) -> TransformerConfig:
  """Maps the `{arch}.*` metadata (llama.cpp's key names) to a `TransformerConfig`:
  d_model = embedding_length, d_ff = feed_forward_length, H = attention.head_count,
  H_kv = attention.head_count_kv, d_head = attention.key_length (else d_model / H),
  rotary_fraction = rope.dimension_count / d_head, rope_theta = rope.freq_base,
  norm_eps = attention.layer_norm_rms_epsilon, max_seq_len = context_length, and the
  vocabulary from `{arch}.vocab_size` or the token list."""
  arch = _value(reader, path, "general.architecture")
  if arch not in ARCHITECTURES:
    raise _key_error(path, "general.architecture",
                     f"is {arch!r}; supported architectures: {ARCHITECTURES}")
  if "rope_freqs.weight" in {t.name for t in reader.tensors}:
    raise ValueError(f"{path}: tensor 'rope_freqs.weight' (per-frequency rope factors, "
                     "Llama 3.1 style) is not supported")
  num_heads = _positive_int(reader, path, f"{arch}.attention.head_count")
  d_model = _positive_int(reader, path, f"{arch}.embedding_length")
  head_dim = _positive_int(reader, path, f"{arch}.attention.key_length", None)
  dim = head_dim or d_model // num_heads
  rotary = _positive_int(reader, path, f"{arch}.rope.dimension_count", dim)
  vocab = _positive_int(reader, path, f"{arch}.vocab_size", None)
  if vocab is None:
    vocab = len(_value(reader, path, "tokenizer.ggml.tokens"))
  return TransformerConfig(
      family="llama", vocab_size=vocab, d_model=d_model,
      num_layers=_positive_int(reader, path, f"{arch}.block_count"),
      num_heads=num_heads,
      num_kv_heads=_positive_int(reader, path, f"{arch}.attention.head_count_kv", num_heads),
      head_dim=head_dim if head_dim is not None and head_dim != d_model // num_heads else None,
      d_ff=_positive_int(reader, path, f"{arch}.feed_forward_length"),
      max_seq_len=_positive_int(reader, path, f"{arch}.context_length"),
      rope_theta=_float32(_value(reader, path, f"{arch}.rope.freq_base", 10000.0)),
      rotary_fraction=rotary / dim, rope_scaling=_rope_scaling(reader, path, arch),
      norm_eps=_float32(_value(reader, path, f"{arch}.attention.layer_norm_rms_epsilon")),
      qkv_bias="blk.0.attn_q.bias" in {t.name for t in reader.tensors},
      tie_embeddings="output.weight" not in {t.name for t in reader.tensors},
      activation="silu")


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
  """Inverse of llama.cpp's Q/K row permutation (module docstring); `w` is (h d, ...)."""
  d = w.shape[0] // heads
  return w.reshape(heads, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _dequantize(tensor, path: str, dtype) -> np.ndarray:
  """One tensor as a `dtype` array in GGUF's NumPy layout (rows first: (out, in))."""
  from gguf import quants

  try:
    values = quants.dequantize(tensor.data, tensor.tensor_type)
  except NotImplementedError:
    raise ValueError(f"{path}: tensor {tensor.name!r} has type {tensor.tensor_type.name}, "
                     "which the gguf package cannot dequantize") from None
  expected = tuple(int(n) for n in reversed(tensor.shape))
  if values.shape != expected or not np.issubdtype(values.dtype, np.floating):
    raise ValueError(f"{path}: tensor {tensor.name!r} of type {tensor.tensor_type.name} "
                     f"dequantizes to {values.dtype}{values.shape}; expected float{expected}")
  return np.asarray(values, dtype=np.float32).astype(dtype, copy=False)


def _gguf_names(config: TransformerConfig, i: int) -> dict[tuple, str]:
  """Our param path (within layer i) -> GGUF tensor name."""
  names = {("attn_norm", "scale"): f"blk.{i}.attn_norm.weight",
           ("mlp_norm", "scale"): f"blk.{i}.ffn_norm.weight"}
  for ours, theirs in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                       ("o_proj", "attn_output")):
    names[("attn", ours, "kernel")] = f"blk.{i}.{theirs}.weight"
    if config.qkv_bias and ours != "o_proj":
      names[("attn", ours, "bias")] = f"blk.{i}.{theirs}.bias"
  for ours, theirs in (("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"),
                       ("down_proj", "ffn_down")):
    names[("mlp", ours, "kernel")] = f"blk.{i}.{theirs}.weight"
  return names


def params_from_gguf(reader, path: str, config: TransformerConfig, dtype=np.float32) -> dict:
  """Our parameter pytree (NumPy `dtype` leaves) from the file's tensors: dequantized,
  Q/K rows unpermuted (`_unpermute`), linear weights transposed to kernels; every name
  and shape checked."""
  tensors = {t.name: t for t in reader.tensors}
  used: set[str] = set()

  def take(name: str, heads: int | None = None) -> np.ndarray:
    if name not in tensors:
      raise ValueError(f"{path}: tensor {name!r} is missing")
    used.add(name)
    value = _dequantize(tensors[name], path, dtype)
    return _unpermute(value, heads) if heads else value

  paths = {("embed", "embedding"): "token_embd.weight",
           ("final_norm", "scale"): "output_norm.weight"}
  if not config.tie_embeddings:
    paths[("lm_head", "kernel")] = "output.weight"
  for i in range(config.num_layers):
    paths.update({(f"layer_{i}",) + p: n for p, n in _gguf_names(config, i).items()})
  heads = {"q_proj": config.num_heads, "k_proj": config.kv_heads}
  params: dict = {}
  for p, name in paths.items():  # llama.cpp permutes the q/k biases as their rows.
    value = take(name, heads.get(p[-2]) if len(p) > 2 and p[-3] == "attn" else None)
    hf._set(params, p, value.T if p[-1] == "kernel" else value)
  unused = sorted(set(tensors) - used)
  if unused:
    raise ValueError(f"{path}: {len(unused)} tensors this config does not use, e.g. "
                     f"{unused[:5]}")
  hf._check_shapes(params, config)
  return params


def load_gguf(path: str | os.PathLike, dtype=jnp.float32) -> hf.HFCheckpoint:
  """The model in a GGUF file as `hf.HFCheckpoint(config, params, tokenizer, model_type)`.

  Args:
    path: the .gguf file.
    dtype: the parameters' dtype, float32 (default) or bfloat16; bfloat16 also sets the
      config's compute dtype.

  Raises:
    FileNotFoundError: no such file. ValueError: one line naming the file and the key
    or tensor: another architecture, a missing key, an unsupported tensor type, a
    truncated file, a tokenizer this loader does not build.

  Example:
    >>> ckpt = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", dtype=jnp.bfloat16)
  """
  path = os.fspath(path)
  dtype = jnp.dtype(dtype)
  if dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
    raise ValueError(f"dtype={dtype}; expected float32 or bfloat16")
  reader = _open(path)
  config = config_from_gguf(reader, path)
  if dtype == jnp.bfloat16:
    config = TransformerConfig(**{**config.__dict__, "dtype": "bfloat16"})
  tokenizer = tokenizer_from_gguf(reader, path)  # Before the weights: fails fast.
  if tokenizer.vocab_size > config.vocab_size:
    raise _key_error(path, "tokenizer.ggml.tokens", f"has {tokenizer.vocab_size} tokens, more "
                     f"than the model's vocabulary of {config.vocab_size}")
  params = params_from_gguf(reader, path, config, dtype)
  return hf.HFCheckpoint(config, params, tokenizer, "llama")


# ----------------------------------------------------------------------------- tokenizer


def _bytes_to_unicode() -> dict[int, str]:
  """GPT-2's byte -> printable character table (the alphabet of byte-level BPE): the
  188 printable Latin-1 bytes map to themselves, the other 68 to U+0100 onwards."""
  keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]
  extra = [b for b in range(256) if b not in keep]
  return {**{b: chr(b) for b in keep}, **{b: chr(256 + i) for i, b in enumerate(extra)}}


_BYTE_TO_CHAR = _bytes_to_unicode()
_ALPHABET = frozenset(_BYTE_TO_CHAR.values())


def _byte_spelling(token: str) -> str:
  """A vocabulary entry in the byte alphabet: llama.cpp files spell a few tokens (e.g.
  added ones) as raw text; those are re-spelled byte by byte, as transformers does."""
  if set(token) <= _ALPHABET:
    return token
  return "".join(_BYTE_TO_CHAR[b] for b in token.encode("utf-8"))


def _pre_tokenizer(name: str, path: str):
  """The `tokenizers` pre-tokenizer that llama.cpp's `tokenizer.ggml.pre` name means:
  GPT-2's byte-level regex split, preceded for "smollm" by splitting every digit off
  (llama.cpp's SMOLLM rule, the `Digits(individual_digits=True)` of SmolLM's
  tokenizer.json)."""
  from tokenizers import pre_tokenizers

  byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  if name in GPT2_PRE_TOKENIZERS:
    return byte_level
  if name in DIGIT_SPLIT_PRE_TOKENIZERS:
    return pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), byte_level])
  raise _key_error(path, "tokenizer.ggml.pre", f"is {name!r}; supported: "
                   f"{GPT2_PRE_TOKENIZERS + DIGIT_SPLIT_PRE_TOKENIZERS}")


def _special_tokens(reader, path: str, tokens: list[str]) -> dict[str, str]:
  """{"bos_token": ..., "eos_token": ..., ...} from the `tokenizer.ggml.*_token_id` keys."""
  out = {}
  for name, key in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"),
                    ("pad_token", "padding")):
    full = f"tokenizer.ggml.{key}_token_id"
    token_id = _value(reader, path, full, None)
    if token_id is None:
      continue
    if not 0 <= int(token_id) < len(tokens):
      raise _key_error(path, full, f"is {token_id}; expected an id below {len(tokens)}")
    out[name] = tokens[int(token_id)]
  return out


def tokenizer_from_gguf(reader, path: str) -> HFTokenizer:
  """The file's byte-level BPE tokenizer (`tokenizer.ggml.model` "gpt2"), built with the
  `tokenizers` library: the vocabulary from `tokenizer.ggml.tokens`, the merges from
  `tokenizer.ggml.merges`, control tokens (type 3) as special added tokens and
  user-defined ones (type 4) as plain added tokens, the pre-tokenizer that
  `tokenizer.ggml.pre` names, a BOS post-processor when `tokenizer.ggml.add_bos_token`,
  and `tokenizer.chat_template` as `HFTokenizer.chat_template`."""
  from tokenizers import AddedToken, Tokenizer, decoders, models, processors

  kind = _value(reader, path, "tokenizer.ggml.model")
  if kind != "gpt2":
    raise _key_error(path, "tokenizer.ggml.model", f"is {kind!r}; supported: 'gpt2' "
                     "(byte-level BPE)")
  raw = list(_value(reader, path, "tokenizer.ggml.tokens"))
  tokens = [_byte_spelling(t) for t in raw]
  merges = [tuple(m.split(" ", 1)) for m in _value(reader, path, "tokenizer.ggml.merges")]
  types = list(_value(reader, path, "tokenizer.ggml.token_type", [1] * len(tokens)))
  if len(types) != len(raw):
    raise _key_error(path, "tokenizer.ggml.token_type", f"has {len(types)} entries; "
                     f"expected one per token ({len(raw)})")
  tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges,
                             ignore_merges=False))
  tok.pre_tokenizer = _pre_tokenizer(_value(reader, path, "tokenizer.ggml.pre", "default"),
                                     path)
  tok.decoder = decoders.ByteLevel()
  # A control token outside the byte alphabet is a llama.cpp mislabel (transformers skips
  # it too): adding it would grow the vocabulary past the model's.
  tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                          for t, k in zip(raw, types) if k == _CONTROL and set(t) <= _ALPHABET])
  tok.add_tokens([AddedToken(t, special=False, normalized=False)
                  for t, k in zip(tokens, types) if k == _USER_DEFINED])
  special = _special_tokens(reader, path, raw)
  add_bos = bool(_value(reader, path, "tokenizer.ggml.add_bos_token", False))
  if add_bos and "bos_token" in special:
    bos = special["bos_token"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokens.index(bos))])
  return HFTokenizer.from_tokenizer(
      tok, source=path, chat_template=_value(reader, path, "tokenizer.chat_template", None),
      special_tokens=special, add_bos=add_bos)
