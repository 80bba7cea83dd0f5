"""Loading Hugging Face checkpoints: tiny random checkpoints written in the exact HF
naming and layout, checked against an independent NumPy forward pass of the same
tensors (and against `transformers` itself when it is importable)."""

import json
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

from common.models import hf
from common.models import transformer as tfm

V, D, L, H, KV, F = 61, 32, 2, 4, 2, 48


def _hf_config(model_type, **extra):
  cfg = {"model_type": model_type, "vocab_size": V, "hidden_size": D, "num_hidden_layers": L,
         "num_attention_heads": H, "intermediate_size": F, "max_position_embeddings": 64}
  if model_type == "gpt_neox":
    cfg.update(architectures=["GPTNeoXForCausalLM"], rotary_pct=0.5, rotary_emb_base=10000,
               layer_norm_eps=1e-5, use_parallel_residual=True, hidden_act="gelu")
  else:
    cfg.update(num_key_value_heads=KV, rms_norm_eps=1e-6, rope_theta=10000.0,
               hidden_act="silu", tie_word_embeddings=False)
  cfg.update(extra)
  return cfg


def _random_tensors(cfg, rng):
  """HF tensor names and (out, in) shapes for the architecture of `cfg`."""
  t = {}
  r = lambda *shape: (0.2 * rng.standard_normal(shape)).astype(np.float32)
  mt = cfg["model_type"]
  if mt == "gpt_neox":
    d_head = D // H
    t["gpt_neox.embed_in.weight"] = r(V, D)
    for i in range(L):
      p = f"gpt_neox.layers.{i}."
      for norm in ("input_layernorm", "post_attention_layernorm"):
        t[p + norm + ".weight"] = 1 + r(D)
        t[p + norm + ".bias"] = r(D)
      t[p + "attention.query_key_value.weight"] = r(3 * H * d_head, D)
      t[p + "attention.query_key_value.bias"] = r(3 * H * d_head)
      t[p + "attention.dense.weight"] = r(D, D)
      t[p + "attention.dense.bias"] = r(D)
      t[p + "mlp.dense_h_to_4h.weight"] = r(F, D)
      t[p + "mlp.dense_h_to_4h.bias"] = r(F)
      t[p + "mlp.dense_4h_to_h.weight"] = r(D, F)
      t[p + "mlp.dense_4h_to_h.bias"] = r(D)
    t["gpt_neox.final_layer_norm.weight"] = 1 + r(D)
    t["gpt_neox.final_layer_norm.bias"] = r(D)
    t["embed_out.weight"] = r(V, D)
    return t
  d_head = cfg.get("head_dim", D // H)
  t["model.embed_tokens.weight"] = r(V, D)
  for i in range(L):
    p = f"model.layers.{i}."
    t[p + "input_layernorm.weight"] = 1 + r(D)
    t[p + "post_attention_layernorm.weight"] = 1 + r(D)
    t[p + "self_attn.q_proj.weight"] = r(H * d_head, D)
    t[p + "self_attn.k_proj.weight"] = r(KV * d_head, D)
    t[p + "self_attn.v_proj.weight"] = r(KV * d_head, D)
    t[p + "self_attn.o_proj.weight"] = r(D, H * d_head)
    if mt == "qwen2":
      t[p + "self_attn.q_proj.bias"] = r(H * d_head)
      t[p + "self_attn.k_proj.bias"] = r(KV * d_head)
      t[p + "self_attn.v_proj.bias"] = r(KV * d_head)
    if mt == "qwen3":
      t[p + "self_attn.q_norm.weight"] = 1 + r(d_head)
      t[p + "self_attn.k_norm.weight"] = 1 + r(d_head)
    t[p + "mlp.gate_proj.weight"] = r(F, D)
    t[p + "mlp.up_proj.weight"] = r(F, D)
    t[p + "mlp.down_proj.weight"] = r(D, F)
  t["model.norm.weight"] = 1 + r(D)
  if not cfg.get("tie_word_embeddings"):
    t["lm_head.weight"] = r(V, D)
  return t


# ---------------------------------------------------------------- NumPy reference
def _rms(x, w, eps):
  return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * w


def _ln(x, w, b, eps):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * w + b


def _rope(x, rot, theta):
  """x (T, heads, d): rotate the first `rot` dims, half-split convention."""
  t = x.shape[0]
  inv = 1.0 / theta ** (np.arange(0, rot, 2) / rot)
  ang = np.arange(t)[:, None] * inv[None]
  cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
  a, b = x[..., :rot // 2], x[..., rot // 2:rot]
  return np.concatenate([a * cos - b * sin, b * cos + a * sin, x[..., rot:]], -1)


def _attend(q, k, v):
  """Causal attention, q (T, H, d), k/v (T, KV, d) -> (T, H*d)."""
  t, h, d = q.shape
  group = h // k.shape[1]
  k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
  s = np.einsum("thd,shd->hts", q, k) / math.sqrt(d)
  s = np.where(np.tril(np.ones((t, t), bool))[None], s, -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  return np.einsum("hts,shd->thd", p, v).reshape(t, h * d)


def _gelu(x):
  from scipy.special import erf
  return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def numpy_forward(cfg, t, tokens):
  """Logits (T, V) for one sequence, straight from the HF tensors."""
  t = {k: v.astype(np.float64) for k, v in t.items()}
  lin = lambda x, name: x @ t[name + ".weight"].T + t.get(name + ".bias", 0.0)
  if cfg["model_type"] == "gpt_neox":
    d = D // H
    x = t["gpt_neox.embed_in.weight"][tokens]
    for i in range(L):
      p = f"gpt_neox.layers.{i}."
      h1 = _ln(x, t[p + "input_layernorm.weight"], t[p + "input_layernorm.bias"], 1e-5)
      qkv = lin(h1, p + "attention.query_key_value").reshape(len(tokens), H, 3 * d)
      q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
      rot = int(d * cfg["rotary_pct"])
      a = lin(_attend(_rope(q, rot, 10000.0), _rope(k, rot, 10000.0), v), p + "attention.dense")
      h2 = _ln(x, t[p + "post_attention_layernorm.weight"],
               t[p + "post_attention_layernorm.bias"], 1e-5)
      m = lin(_gelu(lin(h2, p + "mlp.dense_h_to_4h")), p + "mlp.dense_4h_to_h")
      x = x + a + m
    x = _ln(x, t["gpt_neox.final_layer_norm.weight"], t["gpt_neox.final_layer_norm.bias"], 1e-5)
    return x @ t["embed_out.weight"].T
  d = cfg.get("head_dim", D // H)
  eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
  x = t["model.embed_tokens.weight"][tokens]
  for i in range(L):
    p = f"model.layers.{i}."
    h1 = _rms(x, t[p + "input_layernorm.weight"], eps)
    q = lin(h1, p + "self_attn.q_proj").reshape(len(tokens), H, d)
    k = lin(h1, p + "self_attn.k_proj").reshape(len(tokens), KV, d)
    v = lin(h1, p + "self_attn.v_proj").reshape(len(tokens), KV, d)
    if cfg["model_type"] == "qwen3":
      q = _rms(q, t[p + "self_attn.q_norm.weight"], eps)
      k = _rms(k, t[p + "self_attn.k_norm.weight"], eps)
    x = x + lin(_attend(_rope(q, d, theta), _rope(k, d, theta), v), p + "self_attn.o_proj")
    h2 = _rms(x, t[p + "post_attention_layernorm.weight"], eps)
    g = lin(h2, p + "mlp.gate_proj")
    x = x + lin(g / (1 + np.exp(-g)) * lin(h2, p + "mlp.up_proj"), p + "mlp.down_proj")
  x = _rms(x, t["model.norm.weight"], eps)
  head = t["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else t["lm_head.weight"]
  return x @ head.T


CASES = {
    "llama": _hf_config("llama"),
    "qwen2": _hf_config("qwen2"),
    "qwen3": _hf_config("qwen3", head_dim=16, tie_word_embeddings=True),
    "gpt_neox": _hf_config("gpt_neox"),
}


def _write(folder, cfg, tensors, shards=1, dtype=None):
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump(cfg, f)
  if dtype is not None:
    tensors = {k: v.astype(dtype) for k, v in tensors.items()}
  if shards == 1:
    save_file(tensors, os.path.join(folder, "model.safetensors"))
    return
  names = sorted(tensors)
  weight_map = {}
  for s in range(shards):
    file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
    part = {n: tensors[n] for n in names[s::shards]}
    save_file(part, os.path.join(folder, file))
    weight_map.update({n: file for n in part})
  with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {}, "weight_map": weight_map}, f)


@pytest.mark.parametrize("name", sorted(CASES))
def test_loaded_logits_match_numpy_forward(name, tmp_path):
  cfg = CASES[name]
  tensors = _random_tensors(cfg, np.random.default_rng(0))
  _write(tmp_path, cfg, tensors, shards=2 if name == "llama" else 1)
  ckpt = hf.load_hf_checkpoint(tmp_path)
  assert ckpt.model_type == name
  tokens = np.random.default_rng(1).integers(0, V, 11)
  ours = tfm.Transformer(ckpt.config).apply({"params": ckpt.params}, jnp.asarray(tokens[None]))
  np.testing.assert_allclose(np.asarray(ours[0]), numpy_forward(cfg, tensors, tokens),
                             atol=2e-4, rtol=1e-4)


def test_bfloat16_checkpoint_loads_as_float32(tmp_path):
  import ml_dtypes
  cfg = CASES["llama"]
  tensors = _random_tensors(cfg, np.random.default_rng(0))
  _write(tmp_path, cfg, tensors, dtype=ml_dtypes.bfloat16)
  ckpt = hf.load_hf_checkpoint(tmp_path)
  emb = ckpt.params["embed"]["embedding"]
  assert emb.dtype == np.float32
  np.testing.assert_array_equal(
      emb, tensors["model.embed_tokens.weight"].astype(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.parametrize("name", sorted(CASES))
def test_save_load_round_trip(name, tmp_path):
  cfg = CASES[name]
  ckpt = hf.load_hf_checkpoint(_written(tmp_path / "a", cfg))
  hf.save_hf_checkpoint(tmp_path / "b", ckpt.params, ckpt.config, ckpt.model_type)
  again = hf.load_hf_checkpoint(tmp_path / "b")
  assert again.config == ckpt.config
  for a, b in zip(_leaves(ckpt.params), _leaves(again.params)):
    np.testing.assert_array_equal(a, b)


def _written(folder, cfg):
  _write(folder, cfg, _random_tensors(cfg, np.random.default_rng(0)))
  return folder


def _leaves(tree):
  import jax
  return jax.tree.leaves(tree)


def test_tokenizer_json_is_loaded(tmp_path):
  from tokenizers import Tokenizer, models, pre_tokenizers
  vocab = {"[UNK]": 0, "hello": 1, "world": 2, "jax": 3}
  tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
  tok.pre_tokenizer = pre_tokenizers.Whitespace()
  _written(tmp_path, CASES["llama"])
  tok.save(str(tmp_path / "tokenizer.json"))
  ckpt = hf.load_hf_checkpoint(tmp_path)
  assert ckpt.tokenizer.encode("hello jax world") == [1, 3, 2]
  assert ckpt.tokenizer.decode([1, 2]) == "hello world"
  assert ckpt.tokenizer.vocab_size == 4


def test_clear_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    hf.load_hf_checkpoint(tmp_path / "nope")
  os.makedirs(tmp_path / "empty")
  with pytest.raises(FileNotFoundError, match="config.json"):
    hf.load_hf_checkpoint(tmp_path / "empty")
  with open(tmp_path / "empty" / "config.json", "w") as f:
    json.dump(CASES["llama"], f)
  with pytest.raises(FileNotFoundError, match="safetensors"):
    hf.load_hf_checkpoint(tmp_path / "empty")
  with pytest.raises(ValueError, match="model_type='bert'"):
    hf.config_from_hf({**CASES["llama"], "model_type": "bert"})
  with pytest.raises(ValueError, match="rope scaling type 'yarn'"):
    hf.config_from_hf({**CASES["llama"], "rope_scaling": {"rope_type": "yarn", "factor": 2}})
  cfg = CASES["qwen2"]
  tensors = _random_tensors(cfg, np.random.default_rng(0))
  del tensors["model.layers.1.self_attn.k_proj.bias"]
  _write(tmp_path / "broken", cfg, tensors)
  with pytest.raises(KeyError, match="model.layers.1.self_attn.k_proj.bias"):
    hf.load_hf_checkpoint(tmp_path / "broken")


def test_matches_transformers_when_available(tmp_path):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  rng = np.random.default_rng(3)
  tokens = rng.integers(0, V, (2, 9))
  for name, cfg in CASES.items():
    folder = _written(tmp_path / name, cfg)
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
      want = reference(torch.tensor(tokens)).logits.numpy()
    ckpt = hf.load_hf_checkpoint(folder)
    got = tfm.Transformer(ckpt.config).apply({"params": ckpt.params}, jnp.asarray(tokens))
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-4, rtol=1e-4, err_msg=name)


# ------------------------------------------------- issue 17: which files, which errors
def test_stray_safetensors_file_is_an_error_not_the_weights(tmp_path):
  """A backup full of zeros beside model.safetensors used to overwrite the weights."""
  cfg = CASES["llama"]
  tensors = _random_tensors(cfg, np.random.default_rng(0))
  _write(tmp_path, cfg, tensors)
  save_file({k: np.zeros_like(v) for k, v in tensors.items()},
            os.path.join(tmp_path, "old_backup.safetensors"))
  with pytest.raises(ValueError, match=r"\['old_backup.safetensors'\] beside model.safetensors"):
    hf.load_hf_checkpoint(tmp_path)
  os.remove(tmp_path / "old_backup.safetensors")
  ckpt = hf.load_hf_checkpoint(tmp_path)
  np.testing.assert_array_equal(ckpt.params["embed"]["embedding"],
                                tensors["model.embed_tokens.weight"])


def test_index_decides_the_shards(tmp_path):
  cfg = CASES["llama"]
  tensors = _random_tensors(cfg, np.random.default_rng(0))
  _write(tmp_path, cfg, tensors, shards=2)
  hf.load_hf_checkpoint(tmp_path)                      # the index and its two shards
  # A model.safetensors beside the index is not listed there: an error, not a merge.
  save_file({k: np.zeros_like(v) for k, v in tensors.items()},
            os.path.join(tmp_path, "model.safetensors"))
  with pytest.raises(ValueError, match=r"\['model.safetensors'\] not listed in .*index.json"):
    hf.load_hf_checkpoint(tmp_path)
  os.remove(tmp_path / "model.safetensors")
  # A tensor in two shards.
  name = "model.norm.weight"
  shard = json.load(open(tmp_path / "model.safetensors.index.json"))["weight_map"][name]
  other = [f for f in os.listdir(tmp_path) if f.endswith(".safetensors") and f != shard][0]
  from safetensors.numpy import load_file
  part = load_file(str(tmp_path / other))
  save_file({**part, name: tensors[name]}, str(tmp_path / other))
  with pytest.raises(ValueError, match=f"tensor '{name}' is in both|tensor '{name}' is in "
                                       f".*{other}, but the index maps it"):
    hf.load_hf_checkpoint(tmp_path)


def test_shards_without_index_or_model_safetensors(tmp_path):
  cfg = CASES["llama"]
  _write(tmp_path, cfg, _random_tensors(cfg, np.random.default_rng(0)), shards=2)
  os.remove(tmp_path / "model.safetensors.index.json")
  with pytest.raises(FileNotFoundError, match=r"no model.safetensors or .*index.json .*found "
                                              r"\['model-00001-of-00002.safetensors'"):
    hf.load_hf_checkpoint(tmp_path)


def _one_line(e):
  message = str(e.value)
  assert "\n" not in message
  return message


def test_loader_errors_name_the_file(tmp_path):
  cfg = CASES["llama"]
  tensors = _random_tensors(cfg, np.random.default_rng(0))
  # A truncated .safetensors (safetensors' own error has no path).
  _write(tmp_path / "a", cfg, tensors)
  weights = tmp_path / "a" / "model.safetensors"
  weights.write_bytes(weights.read_bytes()[:2000])
  with pytest.raises(ValueError, match=r"a/model.safetensors is not a readable safetensors"):
    hf.load_hf_checkpoint(tmp_path / "a")
  # A config.json cut short.
  _write(tmp_path / "b", cfg, tensors)
  (tmp_path / "b" / "config.json").write_text(json.dumps(cfg)[:40])
  with pytest.raises(ValueError, match=r"b/config.json is not valid JSON \(.*: line 1 column 41\)"):
    hf.load_hf_checkpoint(tmp_path / "b")
  # A config.json without hidden_size.
  (tmp_path / "b" / "config.json").write_text(
      json.dumps({k: v for k, v in cfg.items() if k != "hidden_size"}))
  with pytest.raises(ValueError, match=r"b/config.json is missing required keys \['hidden_size'\]"):
    hf.load_hf_checkpoint(tmp_path / "b")
  # A corrupt tokenizer.json.
  _write(tmp_path / "c", cfg, tensors)
  (tmp_path / "c" / "tokenizer.json").write_text('{"version": "1.0", "model": ')
  with pytest.raises(ValueError, match=r"c/tokenizer.json is not a readable tokenizer.json") as e:
    hf.load_hf_checkpoint(tmp_path / "c")
  _one_line(e)
  # A file where the folder should be: not "does not exist".
  with pytest.raises(ValueError, match=r"c/config.json' is a file; expected the model folder"):
    hf.load_hf_checkpoint(tmp_path / "c" / "config.json")


def test_config_values_are_checked(tmp_path):
  cfg = CASES["llama"]
  with pytest.raises(ValueError, match=r"my.json hidden_size='32'; expected a positive integer"):
    hf.config_from_hf({**cfg, "hidden_size": "32"}, source="my.json")
  with pytest.raises(ValueError, match=r"num_attention_heads=0; expected a positive integer"):
    hf.config_from_hf({**cfg, "num_attention_heads": 0})
  with pytest.raises(ValueError, match=r"config.json holds a JSON list"):
    hf.config_from_hf([1, 2])
  with pytest.raises(ValueError, match=r"rope scaling type 'llama3' needs keys \['low_freq"):
    hf.config_from_hf({**cfg, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})
  with pytest.raises(ValueError, match=r"config.json: TransformerConfig.num_kv_heads"):
    hf.config_from_hf({**cfg, "num_key_value_heads": 3})
