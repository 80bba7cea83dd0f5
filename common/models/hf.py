"""Hugging Face checkpoints (Llama, Qwen2, Qwen3, GPT-NeoX) <-> `Transformer` params.

`load_hf_checkpoint(path)` reads a local model folder: config.json, the weights as
model.safetensors or shards listed in model.safetensors.index.json (F32/F16/BF16), and
tokenizer.json when present. Hugging Face stores a linear layer's weight as (out, in)
for y = x W^T + b; ours is the kernel (in, out) for y = x W + b, so every weight is
transposed. GPT-NeoX fuses q, k, v per head: query_key_value.weight is
(H * 3 * d_head, D) laid out as [head][q|k|v][d_head], split here into q/k/v
projections. Both use the half-split rotary convention that `apply_rope` implements,
so no permutation is needed.

`save_hf_checkpoint(path, params, config, tokenizer=)` writes the inverse (config.json +
model.safetensors, and tokenizer.json + tokenizer_config.json with its chat template
when a tokenizer is given), so models trained here, and GGUF files loaded by
`common.models.gguf.load_gguf`, open in `transformers`.

Example:
    >>> ckpt = load_hf_checkpoint("/models/Qwen3-0.6B")
    >>> model = Transformer(ckpt.config)
    >>> logits = model.apply({"params": ckpt.params}, tokens)
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from common.data.tokenizers import HFTokenizer
from common.models.transformer import RopeScaling, TransformerConfig

MODEL_TYPES = ("llama", "qwen2", "qwen3", "gpt_neox")
_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
                "gelu_fast": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
# Buffers some checkpoints carry that are not parameters.
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq", ".attention.bias", ".attention.masked_bias")
_REQUIRED_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size")


class HFCheckpoint(NamedTuple):
  """What `load_hf_checkpoint` returns.

  Attributes:
    config: the `TransformerConfig` equivalent of config.json.
    params: the parameter pytree for `Transformer(config)` (NumPy float32 leaves).
    tokenizer: an `HFTokenizer` if the folder has tokenizer.json, else None.
    model_type: one of MODEL_TYPES.
  """
  config: TransformerConfig
  params: Any
  tokenizer: HFTokenizer | None
  model_type: str


def _rope_settings(hf: Mapping[str, Any]) -> tuple[float, float, RopeScaling]:
  """(theta, rotary_fraction, scaling) from either the transformers<5 keys
  (rope_theta, rope_scaling, rotary_pct, rotary_emb_base) or rope_parameters."""
  params = dict(hf.get("rope_parameters") or {})
  scaling = dict(hf.get("rope_scaling") or {})
  merged = {**scaling, **params}
  theta = merged.get("rope_theta", hf.get("rope_theta", hf.get("rotary_emb_base", 10000.0)))
  default_fraction = 0.25 if hf.get("model_type") == "gpt_neox" else 1.0
  fraction = merged.get("partial_rotary_factor",
                        hf.get("partial_rotary_factor", hf.get("rotary_pct", default_fraction)))
  kind = merged.get("rope_type", merged.get("type", "default"))
  required = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                                                "original_max_position_embeddings")}
  missing = [k for k in required.get(kind, ()) if k not in merged]
  if missing:
    raise ValueError(f"rope scaling type {kind!r} needs keys {missing} in rope_scaling")
  if kind in ("default", None):
    rope = RopeScaling()
  elif kind == "linear":
    rope = RopeScaling(kind="linear", factor=float(merged["factor"]))
  elif kind == "llama3":
    rope = RopeScaling(kind="llama3", factor=float(merged["factor"]),
                       low_freq_factor=float(merged["low_freq_factor"]),
                       high_freq_factor=float(merged["high_freq_factor"]),
                       original_max_len=int(merged["original_max_position_embeddings"]))
  else:
    raise ValueError(f"unsupported rope scaling type {kind!r}; supported: default, linear, llama3")
  return float(theta), float(fraction), rope


def _check_config_keys(hf: Mapping[str, Any], source: str) -> None:
  """One-line errors for a config.json that is not an object, lacks a required key, or
  holds a size that is not a positive integer."""
  if not isinstance(hf, Mapping):
    raise ValueError(f"{source} holds a JSON {type(hf).__name__}; expected an object of "
                     f"model settings")
  missing = [k for k in _REQUIRED_KEYS if k not in hf]
  if missing:
    raise ValueError(f"{source} is missing required keys {missing}; expected all of "
                     f"{list(_REQUIRED_KEYS)}")
  for key in _REQUIRED_KEYS + ("num_key_value_heads", "head_dim", "max_position_embeddings"):
    value = hf.get(key)
    if value is None and key not in _REQUIRED_KEYS:
      continue
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
      raise ValueError(f"{source} {key}={value!r}; expected a positive integer")


def config_from_hf(hf: Mapping[str, Any], source: str = "config.json"
                   ) -> tuple[TransformerConfig, str]:
  """Maps a config.json dict to (TransformerConfig, model_type); `source` (the file's
  path) is named in every error."""
  _check_config_keys(hf, source)
  model_type = hf.get("model_type")
  if model_type not in MODEL_TYPES:
    raise ValueError(f"{source} model_type={model_type!r} is not supported; expected one "
                     f"of {MODEL_TYPES}")
  if hf.get("use_sliding_window"):
    raise ValueError(f"{source} enables use_sliding_window, which this model does not "
                     "implement")
  act = hf.get("hidden_act", "gelu" if model_type == "gpt_neox" else "silu")
  if act not in _ACTIVATIONS:
    raise ValueError(f"{source} hidden_act={act!r} is not supported; expected one of "
                     f"{tuple(_ACTIVATIONS)}")
  try:
    return _config_from_checked(hf, model_type, act)
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(f"{source}: {e}") from e


def _config_from_checked(hf: Mapping[str, Any], model_type: str, act: str
                         ) -> tuple[TransformerConfig, str]:
  theta, fraction, rope = _rope_settings(hf)
  common = dict(
      vocab_size=int(hf["vocab_size"]), d_model=int(hf["hidden_size"]),
      num_layers=int(hf["num_hidden_layers"]), num_heads=int(hf["num_attention_heads"]),
      d_ff=int(hf["intermediate_size"]),
      max_seq_len=int(hf.get("max_position_embeddings", 2048)),
      rope_theta=theta, rotary_fraction=fraction, rope_scaling=rope,
      activation=_ACTIVATIONS[act],
      tie_embeddings=bool(hf.get("tie_word_embeddings", False)))
  if model_type == "gpt_neox":
    bias = bool(hf.get("attention_bias", True))
    config = TransformerConfig(
        family="neox", norm_eps=float(hf.get("layer_norm_eps", 1e-5)),
        qkv_bias=bias, o_bias=bias, mlp_bias=True,
        parallel_residual=bool(hf.get("use_parallel_residual", True)), **common)
  else:
    attention_bias = bool(hf.get("attention_bias", False))
    config = TransformerConfig(
        family="llama", num_kv_heads=int(hf.get("num_key_value_heads") or hf["num_attention_heads"]),
        # Qwen3's config class defaults head_dim to 128 rather than hidden / heads.
        head_dim=hf.get("head_dim", 128 if model_type == "qwen3" else None), norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        qk_norm=model_type == "qwen3",
        qkv_bias=True if model_type == "qwen2" else attention_bias,
        o_bias=False if model_type == "qwen2" else attention_bias,
        mlp_bias=bool(hf.get("mlp_bias", False)), **common)
  return config, model_type


def config_to_hf(config: TransformerConfig, model_type: str) -> dict[str, Any]:
  """The config.json dict for `config` saved as `model_type`."""
  if not config.use_mlp:
    raise ValueError("an attention-only config (use_mlp=False) has no Hugging Face equivalent")
  hf = {"model_type": model_type, "vocab_size": config.vocab_size,
        "hidden_size": config.d_model, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "intermediate_size": config.d_ff,
        "max_position_embeddings": config.max_seq_len,
        "tie_word_embeddings": config.tie_embeddings,
        "hidden_act": {"silu": "silu", "gelu": "gelu", "gelu_tanh": "gelu_new",
                       "relu": "relu"}[config.activation],
        "rope_theta": config.rope_theta, "torch_dtype": "float32"}
  if config.rope_scaling.kind != "none":
    s = config.rope_scaling
    hf["rope_scaling"] = {"rope_type": s.kind, "factor": s.factor}
    if s.kind == "llama3":
      hf["rope_scaling"].update(low_freq_factor=s.low_freq_factor,
                                high_freq_factor=s.high_freq_factor,
                                original_max_position_embeddings=s.original_max_len)
  if model_type == "gpt_neox":
    if config.family != "neox" or not config.mlp_bias or config.qkv_bias != config.o_bias:
      raise ValueError("only a neox-family config with MLP biases and matching q/k/v/o "
                       "biases can be saved as gpt_neox")
    hf.update(architectures=["GPTNeoXForCausalLM"], layer_norm_eps=config.norm_eps,
              use_parallel_residual=config.parallel_residual, rotary_pct=config.rotary_fraction,
              rotary_emb_base=config.rope_theta, attention_bias=config.qkv_bias)
    return hf
  if config.family != "llama" or config.rotary_fraction != 1.0:
    raise ValueError(f"only a llama-family config with full rotary can be saved as {model_type}")
  expected_bias = {"qwen2": (True, False, False)}.get(model_type)
  if expected_bias and (config.qkv_bias, config.o_bias, config.qk_norm) != expected_bias:
    raise ValueError("qwen2 needs qkv_bias=True, o_bias=False, qk_norm=False")
  if model_type == "qwen3" and not config.qk_norm:
    raise ValueError("qwen3 needs qk_norm=True")
  if model_type == "llama" and (config.qk_norm or config.qkv_bias != config.o_bias):
    raise ValueError("llama needs qk_norm=False and qkv_bias == o_bias")
  arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
          "qwen3": "Qwen3ForCausalLM"}[model_type]
  if config.head_dim is not None or model_type == "qwen3":
    hf["head_dim"] = config.dim_per_head
  hf.update(architectures=[arch], num_key_value_heads=config.kv_heads,
            rms_norm_eps=config.norm_eps,
            attention_bias=config.qkv_bias if model_type != "qwen2" else False,
            mlp_bias=config.mlp_bias)
  if model_type in ("qwen2", "qwen3"):
    hf["use_sliding_window"] = False
  return hf


def _layer_names(config: TransformerConfig, model_type: str, i: int) -> dict[tuple, str]:
  """Our param path -> HF tensor name for layer i (NeoX's fused qkv handled apart)."""
  names = {}
  if model_type == "gpt_neox":
    p = f"gpt_neox.layers.{i}."
    names[("attn_norm", "scale")] = p + "input_layernorm.weight"
    names[("attn_norm", "bias")] = p + "input_layernorm.bias"
    names[("mlp_norm", "scale")] = p + "post_attention_layernorm.weight"
    names[("mlp_norm", "bias")] = p + "post_attention_layernorm.bias"
    names[("attn", "o_proj", "kernel")] = p + "attention.dense.weight"
    if config.o_bias:
      names[("attn", "o_proj", "bias")] = p + "attention.dense.bias"
    for ours, theirs in (("up_proj", "dense_h_to_4h"), ("down_proj", "dense_4h_to_h")):
      names[("mlp", ours, "kernel")] = p + f"mlp.{theirs}.weight"
      names[("mlp", ours, "bias")] = p + f"mlp.{theirs}.bias"
    return names
  p = f"model.layers.{i}."
  names[("attn_norm", "scale")] = p + "input_layernorm.weight"
  names[("mlp_norm", "scale")] = p + "post_attention_layernorm.weight"
  for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
    names[("attn", proj, "kernel")] = p + f"self_attn.{proj}.weight"
    if (config.o_bias if proj == "o_proj" else config.qkv_bias):
      names[("attn", proj, "bias")] = p + f"self_attn.{proj}.bias"
  if config.qk_norm:
    names[("attn", "q_norm", "scale")] = p + "self_attn.q_norm.weight"
    names[("attn", "k_norm", "scale")] = p + "self_attn.k_norm.weight"
  for proj in ("gate_proj", "up_proj", "down_proj"):
    names[("mlp", proj, "kernel")] = p + f"mlp.{proj}.weight"
    if config.mlp_bias:
      names[("mlp", proj, "bias")] = p + f"mlp.{proj}.bias"
  return names


def _top_names(config: TransformerConfig, model_type: str) -> dict[tuple, str]:
  if model_type == "gpt_neox":
    names = {("embed", "embedding"): "gpt_neox.embed_in.weight",
             ("final_norm", "scale"): "gpt_neox.final_layer_norm.weight",
             ("final_norm", "bias"): "gpt_neox.final_layer_norm.bias"}
    head = "embed_out.weight"
  else:
    names = {("embed", "embedding"): "model.embed_tokens.weight",
             ("final_norm", "scale"): "model.norm.weight"}
    head = "lm_head.weight"
  if not config.tie_embeddings:
    names[("lm_head", "kernel")] = head
  return names


def _set(tree: dict, path: tuple, value) -> None:
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def params_from_hf(tensors: Mapping[str, np.ndarray], config: TransformerConfig,
                   model_type: str) -> dict:
  """Builds our params (float32 NumPy) from HF tensors by name; checks every shape."""
  params: dict = {}
  used = set()

  def take(name):
    if name not in tensors:
      raise KeyError(f"checkpoint is missing tensor {name!r} (expected for "
                     f"model_type={model_type})")
    used.add(name)
    return np.asarray(tensors[name], dtype=np.float32)

  def put(path, name):
    value = take(name)
    if path[-1] == "kernel":
      value = value.T
    _set(params, path, value)

  for path, name in _top_names(config, model_type).items():
    put(path, name)
  h, d = config.num_heads, config.dim_per_head
  for i in range(config.num_layers):
    for path, name in _layer_names(config, model_type, i).items():
      put((f"layer_{i}",) + path, name)
    if model_type == "gpt_neox":
      p = f"gpt_neox.layers.{i}.attention.query_key_value."
      w = take(p + "weight").reshape(h, 3, d, config.d_model)
      b = take(p + "bias").reshape(h, 3, d) if config.qkv_bias else None
      for j, proj in enumerate(("q_proj", "k_proj", "v_proj")):
        _set(params, (f"layer_{i}", "attn", proj, "kernel"), w[:, j].reshape(h * d, -1).T)
        if b is not None:
          _set(params, (f"layer_{i}", "attn", proj, "bias"), b[:, j].reshape(h * d))
  unused = sorted(n for n in tensors if n not in used and not n.endswith(_IGNORED_SUFFIXES))
  if unused:
    raise ValueError(f"checkpoint has {len(unused)} tensors this config does not use, e.g. "
                     f"{unused[:5]}; is config.json consistent with the weights?")
  _check_shapes(params, config)
  return params


def _check_shapes(params, config) -> None:
  from common.models.transformer import Transformer, init_params  # Shapes only.

  expected = jax.eval_shape(lambda: init_params(Transformer(config), jax.random.PRNGKey(0)))
  got = jax.tree.map(np.shape, params)
  want = jax.tree.map(lambda s: tuple(s.shape), expected)
  if jax.tree.structure(got, is_leaf=lambda x: isinstance(x, tuple)) != jax.tree.structure(
      want, is_leaf=lambda x: isinstance(x, tuple)) or got != want:
    flat_got = dict(jax.tree_util.tree_flatten_with_path(
        got, is_leaf=lambda x: isinstance(x, tuple))[0])
    flat_want = dict(jax.tree_util.tree_flatten_with_path(
        want, is_leaf=lambda x: isinstance(x, tuple))[0])
    diffs = [f"{jax.tree_util.keystr(k)}: got {flat_got.get(k)}, expected {v}"
             for k, v in flat_want.items() if flat_got.get(k) != v]
    raise ValueError("checkpoint tensor shapes do not match config.json: " + "; ".join(diffs[:5]))


def params_to_hf(params: Any, config: TransformerConfig, model_type: str) -> dict[str, np.ndarray]:
  """The inverse of `params_from_hf`: HF tensor name -> float32 array."""
  params = jax.tree.map(lambda x: np.asarray(x, dtype=np.float32), params)
  out = {}

  def get(path):
    value = params
    for key in path:
      value = value[key]
    return value

  for path, name in _top_names(config, model_type).items():
    value = get(path)
    out[name] = value.T if path[-1] == "kernel" else value
  h, d = config.num_heads, config.dim_per_head
  for i in range(config.num_layers):
    for path, name in _layer_names(config, model_type, i).items():
      value = get((f"layer_{i}",) + path)
      out[name] = value.T if path[-1] == "kernel" else value
    if model_type == "gpt_neox":
      attn = params[f"layer_{i}"]["attn"]
      w = np.stack([attn[p]["kernel"].T.reshape(h, d, -1) for p in ("q_proj", "k_proj", "v_proj")],
                   axis=1)
      p = f"gpt_neox.layers.{i}.attention.query_key_value."
      out[p + "weight"] = w.reshape(3 * h * d, -1)
      if config.qkv_bias:
        b = np.stack([attn[p_]["bias"].reshape(h, d) for p_ in ("q_proj", "k_proj", "v_proj")],
                     axis=1)
        out[p + "bias"] = b.reshape(3 * h * d)
  return {k: np.ascontiguousarray(v) for k, v in out.items()}


def _safetensors_files(folder: str) -> tuple[list[str], dict[str, str] | None]:
  """The weight files of a model folder and the index's tensor -> file map (None without
  an index). model.safetensors.index.json wins when present, otherwise model.safetensors
  alone; any other *.safetensors in the folder is an error, so a stray file (a backup,
  a second export) never replaces the real weights."""
  index = os.path.join(folder, "model.safetensors.index.json")
  present = sorted(os.path.basename(f) for f in glob.glob(os.path.join(folder, "*.safetensors")))
  weight_map = None
  if os.path.isfile(index):
    weight_map = _read_json(index, "a model.safetensors.index.json")
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
      raise ValueError(f"{index} has no weight_map; expected {{\"weight_map\": "
                       f"{{tensor name: shard file}}}}")
    listed = sorted(set(weight_map.values()))
    missing = [f for f in listed if not os.path.isfile(os.path.join(folder, f))]
    if missing:
      raise FileNotFoundError(f"shards listed in {index} are missing: {missing}")
    source = f"not listed in {index}"
  elif os.path.isfile(os.path.join(folder, "model.safetensors")):
    listed, source = ["model.safetensors"], "beside model.safetensors (and no index)"
  else:
    raise FileNotFoundError(
        f"no model.safetensors or model.safetensors.index.json in {folder!r}"
        + (f" (found {present}; name the weights model.safetensors or add the index)"
           if present else ""))
  unused = [f for f in present if f not in listed]
  if unused:
    raise ValueError(f"{folder!r} holds weight files {unused} {source}; expected only "
                     f"{listed[:3]}{'...' if len(listed) > 3 else ''}: move the others "
                     f"out of the folder")
  return [os.path.join(folder, f) for f in listed], weight_map


def _read_json(path: str, what: str) -> Any:
  """json.load with one-line errors that name the file."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not valid JSON ({e.msg}: line {e.lineno} column "
                     f"{e.colno}); expected {what}") from None
  except UnicodeDecodeError as e:
    raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); expected "
                     f"{what}") from None


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """All tensors of a model folder (model.safetensors, or the shards that
  model.safetensors.index.json lists) or of one .safetensors file.

  A tensor name found in two files, a tensor in a shard the index does not map to it,
  an index entry no shard holds, a *.safetensors file the folder does not use, and a
  truncated or corrupt file are each a one-line error that names the file.
  """
  from safetensors import safe_open

  path = os.fspath(path)
  if os.path.isdir(path):
    files, weight_map = _safetensors_files(path)
  elif os.path.isfile(path):
    files, weight_map = [path], None
  else:
    raise FileNotFoundError(f"safetensors path {path!r} does not exist")
  tensors, origin = {}, {}
  for file in files:
    try:
      with safe_open(file, framework="numpy") as f:
        for name in f.keys():
          if name in origin:
            raise ValueError(f"tensor {name!r} is in both {origin[name]} and {file}; expected "
                             f"each tensor in one file")
          if weight_map is not None and weight_map.get(name) != os.path.basename(file):
            raise ValueError(f"tensor {name!r} is in {file}, but the index maps it to "
                             f"{weight_map.get(name)!r}; expected the index to match the shards")
          tensors[name], origin[name] = f.get_tensor(name), file
    except ValueError:
      raise
    except Exception as e:  # safetensors' errors (SafetensorError) do not name the file.
      raise ValueError(f"{file} is not a readable safetensors file ({e}); expected a "
                       f"complete safetensors file (truncated or corrupt?)") from None
  if weight_map is not None:
    absent = sorted(set(weight_map) - set(tensors))
    if absent:
      raise ValueError(f"{len(absent)} tensors listed in the index are in no shard, e.g. "
                       f"{absent[:3]}; expected each in the shard the index names")
  return tensors


def load_hf_checkpoint(path: str | os.PathLike) -> HFCheckpoint:
  """Reads a local Hugging Face model folder; see the module docstring."""
  path = os.fspath(path)
  if os.path.isfile(path):
    raise ValueError(f"checkpoint path {path!r} is a file; expected the model folder that "
                     f"holds config.json and model.safetensors (its parent "
                     f"{os.path.dirname(path) or '.'!r}?)")
  if not os.path.isdir(path):
    raise FileNotFoundError(f"checkpoint folder {path!r} does not exist")
  config_path = os.path.join(path, "config.json")
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f"checkpoint folder {path!r} has no config.json")
  config, model_type = config_from_hf(
      _read_json(config_path, "the model's config.json object"), source=config_path)
  # The tokenizer before the weights: a corrupt tokenizer.json fails before the big read.
  tokenizer = HFTokenizer(path) if os.path.isfile(os.path.join(path, "tokenizer.json")) else None
  params = params_from_hf(read_safetensors(path), config, model_type)
  return HFCheckpoint(config, params, tokenizer, model_type)


def save_hf_checkpoint(path: str | os.PathLike, params: Any, config: TransformerConfig,
                       model_type: str | None = None, tokenizer: Any = None) -> str:
  """Writes config.json and model.safetensors (float32) that `transformers` can open.

  model_type defaults to "gpt_neox" for the neox family, else "qwen3" with QK-norm,
  "qwen2" with q/k/v-only biases, otherwise "llama". With `tokenizer` (an `HFTokenizer`,
  e.g. a checkpoint's from `load_gguf`) the folder also gets tokenizer.json and
  tokenizer_config.json (`HFTokenizer.save`), so it is complete. Files are written to
  temporary names and renamed, so an interrupted save never leaves a half-written
  checkpoint.

  Example:
    >>> ckpt = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    >>> save_hf_checkpoint("/tmp/smollm2", ckpt.params, ckpt.config, tokenizer=ckpt.tokenizer)
  """
  if tokenizer is not None and not hasattr(tokenizer, "save"):
    raise ValueError(f"tokenizer={type(tokenizer).__name__} cannot be saved; expected an "
                     "HFTokenizer (save_byte_tokenizer writes the byte LM's)")
  from safetensors.numpy import save_file

  if model_type is None:
    if config.family == "neox":
      model_type = "gpt_neox"
    elif config.qk_norm:
      model_type = "qwen3"
    elif config.qkv_bias and not config.o_bias:
      model_type = "qwen2"
    else:
      model_type = "llama"
  hf_config = config_to_hf(config, model_type)
  tensors = params_to_hf(params, config, model_type)
  path = os.fspath(path)
  os.makedirs(path, exist_ok=True)
  weights, cfg = os.path.join(path, "model.safetensors"), os.path.join(path, "config.json")
  save_file(tensors, weights + ".tmp", metadata={"format": "pt"})
  with open(cfg + ".tmp", "w") as f:
    json.dump(hf_config, f, indent=2)
  os.replace(weights + ".tmp", weights)
  os.replace(cfg + ".tmp", cfg)
  if tokenizer is not None:
    tokenizer.save(path)
  return path
