"""Bad input across the public API: one table, one clear error per case.

Every row calls one public function (a method's API, a loader, the run machinery) with
one bad argument and asserts the exception type and a message fragment that names the
argument (and, where useful, the value or the expectation). The checks run at the
Python boundary, before any tracing or compute, so they cost nothing under `jit`.
"""

import dataclasses
import json
import os
import tempfile
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pandas as pd
import pytest

from common import checkpoint as checkpoint_lib
from common import config as config_lib
from common import kernels
from common import llm
from common import physics
from common import report as report_lib
from common import rl
from common import sharding as sharding_lib
from common import train as train_lib
from common import trials as trials_lib
from common.data import causal
from common.data import fluid_meshes, lbm, mechanisms, text
from common.data.tokenizers import ByteTokenizer, HFTokenizer
from common.models import hf
from common.models import logprobs as lm_logprobs
from common.models import sampling as lm_sampling
from common.models import transformer as lm_tfm
from methods import adathink
from methods.adathink import training as adathink_training
from methods import cgfm
from methods import divin
from methods import flow_matching as fm
from methods import experience_library as el
from methods import kernel_ridge as kr
from methods import rabitq_attention as ra
from methods import susceptibility as sus
from methods import zeroth_order as zo
from methods.divin import metrics as divin_metrics
from methods.flow_matching import closed_form as fm_closed_form
from methods.kernel_ridge import krr
from methods import fusion_route as fr
from methods.lilo import acquisition as lilo_acquisition
from methods.lilo import gp as lilo_gp
from methods.lilo import problems as lilo_problems
from methods.lilo import simulated as lilo_simulated
from methods.lilo import translator as lilo_translator
from methods.unlearning import certificate
from methods.unlearning import metrics as unlearning_metrics
from methods.unlearning import objective as unlearning_objective
from methods.zeroth_order import recipes as zo_recipes
from methods.zeroth_order import task as zo_task


# Folders the cases write to, removed when the worker exits (not left in /tmp).
_SCRATCH = tempfile.TemporaryDirectory(prefix="bad_input_")


def _scratch(prefix: str = "") -> str:
  return tempfile.mkdtemp(prefix=prefix, dir=_SCRATCH.name)


@dataclasses.dataclass(frozen=True)
class Case:
  name: str                    # the test id: <module>/<what is wrong>
  call: Callable[[], Any]      # calls the public function with the bad input
  error: type                  # the exception type expected
  match: str                   # a regex fragment of the message (names the argument)



# --- Run machinery: training loop, checkpoints, trials, runner, configs, sharding.

def _runs_file() -> str:
  """A fresh regular file, to pass where a directory is expected."""
  fd, path = tempfile.mkstemp(prefix="not_a_dir_")
  os.close(fd)
  return path


def _runs_train(workdir=None, optimizer=None, mesh=None, mesh_sizes=None, **overrides):
  config = train_lib.default_train_config(num_steps=2, batch_size=4, progress_bar=False)
  config.update(overrides)
  config.mesh.update(mesh_sizes or {})
  return train_lib.train(
      init_fn=lambda key: {"w": jnp.zeros(3)},
      loss_fn=lambda params, batch, key: (jnp.sum(params["w"] ** 2), {}),
      batch_fn=lambda seed, step: {"x": np.zeros((4, 3), np.float32)},
      optimizer=optax.sgd(0.1) if optimizer is None else optimizer, config=config,
      workdir=_scratch() if workdir is None else workdir, mesh=mesh)


def _runs_experiment(workdir):
  return report_lib.run_experiment("demo", lambda config, w: None,
                                   ml_collections.ConfigDict({"n": 1}), workdir)


ROWS_RUNS = [
    Case("runs/train_workdir_is_a_file", lambda: _runs_train(workdir=_runs_file()),
         ValueError, r"workdir '.*not_a_dir_.*' is a file; expected a directory"),
    Case("runs/train_workdir_not_writable", lambda: _runs_train(workdir="/proc/x"),
         ValueError, r"workdir '/proc/x' is not a writable directory"),
    Case("runs/train_workdir_empty", lambda: _runs_train(workdir=""),
         ValueError, r"workdir must be a non-empty path"),
    Case("runs/runner_workdir_is_a_file", lambda: _runs_experiment(_runs_file()),
         ValueError, r"workdir '.*not_a_dir_.*' is a file"),
    Case("runs/runner_workdir_not_writable", lambda: _runs_experiment("/proc/x"),
         ValueError, r"workdir '/proc/x' is not a writable directory"),
    Case("runs/train_num_steps_zero", lambda: _runs_train(num_steps=0),
         ValueError, r"config.num_steps must be an int >= 1, got 0"),
    Case("runs/train_optimizer_not_optax", lambda: _runs_train(optimizer="adam"),
         TypeError, r"optimizer must be an optax.GradientTransformation"),
    Case("runs/train_mesh_not_a_mesh", lambda: _runs_train(mesh="data"),
         TypeError, r"mesh must be a jax.sharding.Mesh or None, got str"),
    Case("runs/checkpoint_float_step", lambda: checkpoint_lib.save(
        checkpoint_lib.make_manager(_scratch(), keep=1), 3.5, {"w": jnp.zeros(2)}),
         ValueError, r"checkpoint step must be an int >= 0, got 3.5"),
    Case("runs/checkpoint_keep_zero", lambda: checkpoint_lib.make_manager(
        _scratch(), keep=0), ValueError, r"keep must be an int >= 1, got 0"),
    Case("runs/fingerprint_exclude_is_a_string", lambda: trials_lib.config_fingerprint(
        {"n": 1, "ns": 2}, exclude="ns"), TypeError, r"exclude must be a sequence of key names"),
    Case("runs/trial_log_fingerprint_not_a_str", lambda: trials_lib.TrialLog(
        os.path.join(_scratch(), "t.jsonl"), {"lr": 0.1}),
         TypeError, r"fingerprint must be a str .*got dict"),
    Case("runs/cached_stage_fingerprint_not_a_str", lambda: trials_lib.cached_stage(
        _scratch(), "s", 123, lambda: 1), TypeError, r"fingerprint must be a str"),
    Case("runs/stage_kind_unknown", lambda: trials_lib.stage_path("/tmp", "s", kind="pkl"),
         ValueError, r"stage kind must be 'json' or 'npz', got 'pkl'"),
    Case("runs/train_mesh_size_zero", lambda: train_lib.validate_train_config(
        train_lib.default_train_config(mesh={"fsdp": 0})),
         ValueError, r"config.mesh.fsdp=0 is invalid: expected axes"),
    Case("runs/train_mesh_and_mesh_shape_disagree",
         lambda: _runs_train(mesh_shape=(1,), mesh_sizes={"data": 2}),
         ValueError, r"config.mesh_shape=\(1,\) and config.mesh.data=2 disagree"),
    Case("runs/mesh_from_sizes_unknown_axis", lambda: sharding_lib.mesh_from_sizes({"model": 2}),
         ValueError, r"mesh axes \['model'\] are unknown; expected sizes for some of"),
    Case("runs/mesh_shape_float", lambda: sharding_lib.make_mesh((1.5,)),
         TypeError, r"mesh_shape must be None or a sequence of ints, got \(1.5,\)"),
    Case("runs/mesh_axis_names_string", lambda: sharding_lib.make_mesh((-1,), axis_names="data"),
         TypeError, r"axis_names must be a sequence of names"),
    Case("runs/shard_batch_string_leaf", lambda: sharding_lib.shard_batch(
        {"s": np.array(["a", "b"])}, sharding_lib.make_mesh()),
         TypeError, r"batch leaf \['s'\] has dtype <U1"),
    Case("runs/config_in_range_bool", lambda: config_lib.in_range(
        ml_collections.ConfigDict({"p": True}), "p", 0, 2),
         config_lib.ConfigError, r"config.p=True is invalid: expected a number in \(0, 2\)"),
    Case("runs/config_one_of_string_allowed", lambda: config_lib.one_of(
        ml_collections.ConfigDict({"kind": "a"}), "kind", "abc"),
         TypeError, r"allowed must be a sequence of values, got the string 'abc'"),
    Case("runs/config_unknown_preset", lambda: config_lib.build(
        "demo", {"n": 1}, {"quick": {}}, "huge"),
         config_lib.ConfigError, r"unknown preset 'huge' for demo; allowed: quick"),
    Case("runs/passes_in_without_a_pair", lambda: report_lib.passes(0.5, "in", 1.0),
         ValueError, r"threshold for op 'in' must be a \(low, high\) pair, got 1.0"),
]


# --- Loaders: HF checkpoints, tokenizers, text, mechanisms, LBM and mesh data.

_LLAMA = {"model_type": "llama", "vocab_size": 11, "hidden_size": 8, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 16}


def _hf_folder(config=_LLAMA, weights=None, extra=()):
  """A throwaway model folder: config.json (a dict, or raw text), model.safetensors
  (raw bytes) and extra files {name: bytes}; the weights need not match the config,
  the checks under test fire before they are read."""
  from safetensors.numpy import save as save_bytes
  folder = _scratch(prefix="bad_hf_")
  with open(os.path.join(folder, "config.json"), "w") as f:
    f.write(config if isinstance(config, str) else json.dumps(config))
  if weights is None:
    weights = save_bytes({"model.norm.weight": np.ones(8, np.float32)})
  with open(os.path.join(folder, "model.safetensors"), "wb") as f:
    f.write(weights)
  for name, data in dict(extra).items():
    with open(os.path.join(folder, name), "wb") as f:
      f.write(data)
  return folder


def _stray_file():
  from safetensors.numpy import save as save_bytes
  return _hf_folder(extra={"old_backup.safetensors": save_bytes({"x": np.zeros(2, np.float32)})})


def _truncated_weights():
  from safetensors.numpy import save as save_bytes
  return _hf_folder(weights=save_bytes({"x": np.zeros(64, np.float32)})[:100])


def _npz(**arrays):
  path = os.path.join(_scratch(prefix="bad_npz_"), "flow.npz")
  base = dict(pos=np.zeros((4, 2)), triangles=np.array([[0, 1, 2]]),
              states=np.zeros((3, 4, 3)), cond=np.zeros(3))
  np.savez(path, **{**base, **arrays})
  return path


_NAN_STATES = np.zeros((3, 4, 3))
_NAN_STATES[1, 2, 0] = np.nan
_TEXT_TOKENS = np.arange(100, dtype=np.int32)

ROWS_LOADERS = [
    Case("hf/stray_safetensors_beside_model", lambda: hf.load_hf_checkpoint(_stray_file()),
         ValueError, r"\['old_backup.safetensors'\] beside model.safetensors"),
    Case("hf/truncated_safetensors", lambda: hf.load_hf_checkpoint(_truncated_weights()),
         ValueError, r"model.safetensors is not a readable safetensors file"),
    Case("hf/config_json_cut_short", lambda: hf.load_hf_checkpoint(_hf_folder(json.dumps(_LLAMA)[:30])),
         ValueError, r"config.json is not valid JSON \(.*: line 1 column"),
    Case("hf/config_json_missing_hidden_size",
         lambda: hf.load_hf_checkpoint(_hf_folder({k: v for k, v in _LLAMA.items() if k != "hidden_size"})),
         ValueError, r"config.json is missing required keys \['hidden_size'\]"),
    Case("hf/config_string_size", lambda: hf.config_from_hf({**_LLAMA, "hidden_size": "8"}),
         ValueError, r"hidden_size='8'; expected a positive integer"),
    Case("hf/corrupt_tokenizer_json",
         lambda: hf.load_hf_checkpoint(_hf_folder(extra={"tokenizer.json": b'{"version": '})),
         ValueError, r"tokenizer.json is not a readable tokenizer.json"),
    Case("hf/path_is_a_file_not_a_folder",
         lambda: hf.load_hf_checkpoint(os.path.join(_hf_folder(), "config.json")),
         ValueError, r"config.json' is a file; expected the model folder"),
    Case("hf/llama3_rope_missing_keys",
         lambda: hf.config_from_hf({**_LLAMA, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}),
         ValueError, r"rope scaling type 'llama3' needs keys \['low_freq_factor'"),
    Case("tokenizers/hf_tokenizer_corrupt_file",
         lambda: HFTokenizer(os.path.join(_hf_folder(extra={"tokenizer.json": b"{"}), "tokenizer.json")),
         ValueError, r"tokenizer.json is not a readable tokenizer.json"),
    Case("tokenizers/byte_decode_float_ids", lambda: ByteTokenizer().decode([104.7, 105.2]),
         TypeError, r"ids has dtype float64; expected integer"),
    Case("tokenizers/byte_decode_out_of_vocab", lambda: ByteTokenizer().decode([1, 256]),
         ValueError, r"ids\[1\]=256 is outside the vocabulary"),
    Case("text/window_batch_float_tokens", lambda: text.window_batch(_TEXT_TOKENS + 0.5, 0, 0, 2, 8),
         TypeError, r"data has dtype float64; expected integer"),
    Case("text/window_batch_zero_batch", lambda: text.window_batch(_TEXT_TOKENS, 0, 0, 0, 8),
         ValueError, r"batch_size=0; expected an int >= 1"),
    Case("text/eval_windows_zero_seq_len", lambda: next(text.eval_windows(_TEXT_TOKENS, 0, 2)),
         ValueError, r"seq_len=0; expected an int >= 1"),
    Case("text/unigram_id_past_vocab",
         lambda: text.unigram_cross_entropy_bits(_TEXT_TOKENS, np.array([1, 300])),
         ValueError, r"evaluate\[1\]=300 is outside the vocabulary"),
    Case("text/unigram_empty_evaluate",
         lambda: text.unigram_cross_entropy_bits(_TEXT_TOKENS, np.array([], np.int32)),
         ValueError, r"evaluate is empty"),
    Case("mechanisms/nan_probability", lambda: mechanisms.mechanism_batch(0, 0, 1, 8, p_pair=float("nan")),
         ValueError, r"probabilities \(nan"),
    Case("mechanisms/stratified_zero_per_mechanism",
         lambda: mechanisms.stratified_sample(np.array([0, 1]), 0, seed=0),
         ValueError, r"per_mechanism=0; expected an int >= 1"),
    Case("lbm/nan_center", lambda: lbm.make_geometry(80, 24, diameter=6.0, center=(float("nan"), 12.0)),
         ValueError, r"geometry cx=nan; expected a finite number"),
    Case("lbm/non_integer_nx", lambda: lbm.make_geometry(80.7, 24, diameter=6.0),
         TypeError, r"nx=80.7; expected an int"),
    Case("lbm/poiseuille_nan_force", lambda: lbm.simulate_poiseuille(10, 0.8, float("nan"), 10),
         ValueError, r"force=nan; expected a finite number"),
    Case("lbm/poiseuille_nan_magic",
         lambda: lbm.simulate_poiseuille(10, 0.8, 1e-5, 10, magic=float("nan")),
         ValueError, r"magic=nan; expected a finite TRT magic parameter"),
    Case("fluid_meshes/nan_states", lambda: fluid_meshes.load_npz(_npz(states=_NAN_STATES)),
         ValueError, r"flow.npz: npz key 'states' holds nan at index \(1, 2, 0\)"),
    Case("fluid_meshes/empty_states",
         lambda: fluid_meshes.load_npz(_npz(states=np.zeros((0, 4, 3)), cond=np.zeros(0))),
         ValueError, r"'states' must have shape \(M, 4, C\) with M, C >= 1"),
]


# --- The LM stack, zeroth-order optimisers and RaBitQ attention.

# A tiny LM config; the checks run before any parameter is read, so params can be {}.
_LM = lm_tfm.Transformer(lm_tfm.llama_config(vocab_size=37, d_model=16, num_layers=1,
                                             num_heads=2, d_ff=16, max_seq_len=16))
_TOKENS = np.arange(8, dtype=np.int32).reshape(2, 4)
_OOV = np.where(_TOKENS == 5, 37, _TOKENS)           # id 37 at [1, 1]: one past the vocabulary
_FULL_CACHE = lm_tfm.KVCache(jnp.zeros((1, 2, 8, 2, 8)), jnp.zeros((1, 2, 8, 2, 8)),
                             jnp.asarray(6, jnp.int32))
_ZO_PARAMS = {"a": {"kernel": jnp.zeros((4, 3))}, "b": {"kernel": jnp.zeros((3, 2))}}
_ZO_LOSS = lambda p, b: jnp.sum(p["a"]["kernel"] ** 2)
_KEY = jax.random.PRNGKey(0)

ROWS_LM = [
    Case("transformer/out_of_vocabulary_token_id",
         lambda: _LM.apply({"params": {}}, _OOV), ValueError,
         r"tokens\[1, 1\] = 37 is out of the vocabulary; expected ids in \[0, 37\)"),
    Case("transformer/negative_token_id",
         lambda: _LM.apply({"params": {}}, -_TOKENS), ValueError, r"tokens\[0, 1\] = -1"),
    Case("transformer/float_tokens",
         lambda: _LM.apply({"params": {}}, _TOKENS.astype(np.float32)), TypeError,
         r"tokens must be integer token ids, got dtype float32"),
    Case("transformer/cache_overflow",
         lambda: _LM.apply({"params": {}}, _TOKENS, _FULL_CACHE), ValueError,
         r"cache overflow: cache.length \+ tokens = 6 \+ 4 = 10 .* holds 8"),
    Case("transformer/config_rope_theta_zero",
         lambda: lm_tfm.llama_config(rope_theta=0.0), ValueError,
         r"TransformerConfig.rope_theta=0.0"),
    Case("transformer/config_num_kv_heads_zero",
         lambda: lm_tfm.llama_config(num_kv_heads=0), ValueError,
         r"TransformerConfig.num_kv_heads=0"),
    Case("transformer/rope_scaling_factor_zero",
         lambda: lm_tfm.llama_config(rope_scaling=lm_tfm.RopeScaling("linear", 0.0)),
         ValueError, r"RopeScaling.factor=0.0"),
    Case("sampling/generate_out_of_vocabulary_prompt",
         lambda: lm_sampling.generate(_LM, {}, _OOV, _KEY, max_new_tokens=2), ValueError,
         r"prompt\[1, 1\] = 37 is out of the vocabulary"),
    Case("sampling/generate_nan_temperature",
         lambda: lm_sampling.generate(_LM, {}, _TOKENS, _KEY, max_new_tokens=2,
                                      temperature=float("nan")), ValueError, r"temperature=nan"),
    Case("sampling/generate_negative_max_new_tokens",
         lambda: lm_sampling.generate(_LM, {}, _TOKENS, _KEY, max_new_tokens=-1), ValueError,
         r"max_new_tokens=-1"),
    Case("sampling/generate_empty_prompt",
         lambda: lm_sampling.generate(_LM, {}, _TOKENS[:, :0], _KEY, max_new_tokens=2),
         ValueError, r"prompt must be \(batch, time\) with time >= 1"),
    Case("sampling/top_p_zero",
         lambda: lm_sampling.top_p_logits(jnp.zeros(4), 0.0), ValueError, r"top_p=0.0"),
    Case("logprobs/out_of_vocabulary_target",
         lambda: lm_logprobs.sequence_logprob(jnp.zeros((1, 4, 8)), jnp.array([[1, 2, 8, 3]])),
         ValueError, r"tokens\[0, 2\] = 8 is out of the vocabulary"),
    Case("logprobs/mask_shape",
         lambda: lm_logprobs.next_token_loss(jnp.zeros((1, 4, 8)), jnp.zeros((1, 4), jnp.int32),
                                             jnp.ones((1, 4))), ValueError,
         r"mask has shape \(1, 4\); expected \(1, 3\)"),
    Case("zeroth_order/agzo_without_taps",
         lambda: zo.activation_bases(_ZO_PARAMS, {}, _KEY, rank=2), ValueError,
         r"no tap recorded for 2 of 2 linear layers \(a, b\).*untapped='isotropic'"),
    Case("zeroth_order/agzo_tap_width_mismatch",
         lambda: zo.activation_bases(_ZO_PARAMS, {"a": {"input": jnp.ones((5, 7))},
                                                  "b": {"input": jnp.ones((5, 3))}},
                                     _KEY, rank=2), ValueError,
         r"taps\[a\]\['input'\] has shape \(5, 7\); expected \(\.\.\., 4\)"),
    Case("zeroth_order/agzo_unknown_untapped_option",
         lambda: zo.agzo(_ZO_LOSS, key=_KEY, untapped="gaussian"), ValueError,
         r"untapped='gaussian'"),
    Case("zeroth_order/mezo_infinite_eps",
         lambda: zo.mezo(_ZO_LOSS, float("inf"), key=_KEY), ValueError,
         r"mezo: eps=inf; expected a finite number > 0"),
    Case("zeroth_order/lozo_float_rank",
         lambda: zo.lozo(_ZO_LOSS, key=_KEY, rank=1.5), ValueError,
         r"lozo: rank=1.5; expected an int >= 1"),
    Case("zeroth_order/int_key",
         lambda: zo.mezo(_ZO_LOSS, key=3), TypeError, r"key=3; expected a PRNG key"),
    Case("zeroth_order/make_step_not_a_transformation",
         lambda: zo.make_step(_ZO_LOSS), TypeError, r"make_step: tx=.*GradientTransformation"),
    Case("zeroth_order/split_trainable_unknown_mode",
         lambda: zo_task.split_trainable(_ZO_PARAMS, "lineer"), ValueError,
         r"mode='lineer'; expected 'all' or 'linear'"),
    Case("zeroth_order/recipe_unknown_name",
         lambda: zo_recipes.optimizer("sgd", _ZO_LOSS, _ZO_LOSS, 1e-3, None, key=_KEY),
         ValueError, r"name='sgd'"),
    Case("zeroth_order/alignment_zero_draws",
         lambda: zo.alignment_draws(None, _ZO_PARAMS, None, _ZO_PARAMS, _KEY, 0), ValueError,
         r"num_draws=0"),
    Case("rabitq/top_p_select_zero_mass",
         lambda: ra.top_p_select(jnp.zeros(3), jnp.ones(3, bool), 0.0, 3), ValueError,
         r"top_p_select: p=0.0"),
    Case("rabitq/query_at_cosine_out_of_range",
         lambda: ra.query_at_cosine(jnp.array([1.0, 0.0]), jnp.array([0.3, 2.0]),
                                    jnp.array([1.5])), ValueError, r"query_at_cosine: cos="),
    Case("rabitq/with_top_p_on_a_plain_cache",
         lambda: ra.with_top_p(_FULL_CACHE, 0.9), ValueError, r"with_top_p: cache.state is None"),
    Case("rabitq/config_float_budget",
         lambda: ra.RaBitQConfig(max_budget=64.5), ValueError,
         r"RaBitQConfig.max_budget=64.5; expected an int"),
    Case("rabitq/quantize_query_zero_bits",
         lambda: ra.quantize_query(jnp.ones((2, 32)), bits=0, randomized=False), ValueError,
         r"quantize_query: bits=0"),
]


# --- Kernel ridge, flow matching and DivIn.

_T = np.linspace(-1.0, 1.0, 12)
_X = np.linspace(0.0, 1.0, 12)[:, None]
_Y = _T ** 2 + _X[:, 0]
_HYPER = kr.TwoStageHyper(0.5, 0.5, 1e-3, 0.5, 1e-3)


def _with_nan(a, index):
  a = np.array(a, dtype=float)
  a[index] = np.nan
  return a


def _fm_loss_on(batch):
  apply = lambda params, t, x, cond: x   # no network: the batch check runs first
  return fm.make_loss_fn(apply)(None, batch, jax.random.PRNGKey(0))


ROWS_REGRESSION_FLOWS = [
    Case("kernel_ridge/nan_outcome", lambda: kr.fit_two_stage(_T, _X, _with_nan(_Y, 3), _HYPER),
         ValueError, r"outcome y has a non-finite value nan at index 3"),
    Case("kernel_ridge/inf_treatment", lambda: kr.fit_two_stage(
        np.where(np.arange(12) == 5, np.inf, _T), _X, _Y, _HYPER),
         ValueError, r"treatment t has a non-finite value inf at index 5"),
    Case("kernel_ridge/nan_outcome_in_selection", lambda: kr.select_two_stage(
        _T, _X, _with_nan(_Y, 0), jax.random.PRNGKey(0)),
         ValueError, r"outcome y has a non-finite value nan at index 0"),
    Case("kernel_ridge/hyper_as_plain_tuple", lambda: kr.fit_two_stage(
        _T, _X, _Y, (0.5, 0.5, 1e-3, 0.5, 1e-3)),
         TypeError, r"hyper must be a TwoStageHyper, got tuple"),
    Case("kernel_ridge/infinite_ridge", lambda: kr.fit_two_stage(
        _T, _X, _Y, _HYPER._replace(lam2=float("inf"))),
         ValueError, r"lam2 must be finite, got inf"),
    Case("kernel_ridge/zero_chunk_size", lambda: kr.fit_two_stage(_T, _X, _Y, _HYPER, chunk_size=0),
         ValueError, r"chunk_size must be None or an int >= 1, got 0"),
    Case("kernel_ridge/nan_in_selection_grid", lambda: kr.select_two_stage(
        _T, _X, _Y, jax.random.PRNGKey(0), kr.SelectionGrid(lams2=(float("nan"),))),
         ValueError, r"selection grid lams2 must be non-empty, > 0 and finite"),
    Case("kernel_ridge/loo_select_zero_ridge", lambda: kr.loo_select(
        [kernels.Kernel(0.5)], _T, _Y, (0.0,)),
         ValueError, r"lams must be non-empty, > 0 and finite"),
    Case("kernel_ridge/krr_fit_nan_targets", lambda: krr.fit(
        kernels.Kernel(0.5), _T, _with_nan(_Y, 2), 1e-3),
         ValueError, r"targets y has a non-finite value nan at index 2"),
    Case("kernel_ridge/evaluation_grid_nan", lambda: kr.evaluation_grid(_with_nan(_T, 4)),
         ValueError, r"treatments t has a non-finite value nan at index 4"),
    Case("kernels/zero_lengthscale", lambda: kernels.Kernel(0.0)(_T, _T),
         ValueError, r"kernel lengthscale must be finite and > 0, got 0.0"),
    Case("causal/non_integer_sample_size", lambda: causal.overlap_design(jax.random.PRNGKey(0), 10.5),
         ValueError, r"sample size n must be an integer >= 2, got 10.5"),
    Case("causal/nan_noise", lambda: causal.overlap_design(jax.random.PRNGKey(0), 10,
                                                           noise=float("nan")),
         ValueError, r"noise must be finite and >= 0, got nan"),
    Case("flow_matching/batch_missing_x1", lambda: _fm_loss_on(
        {"x": jnp.zeros((4, 2)), "cond": jnp.zeros((4, 3))}),
         ValueError, r"batch is missing keys \['x1'\]: expected keys \['x1', 'cond'\], got keys"),
    Case("flow_matching/batch_not_a_dict", lambda: _fm_loss_on((jnp.zeros((4, 2)), jnp.zeros((4, 3)))),
         TypeError, r"batch must be a dict with keys \['x1', 'cond'\]"),
    Case("flow_matching/batch_cond_rows_differ", lambda: _fm_loss_on(
        {"x1": jnp.zeros((4, 2)), "cond": jnp.zeros((5, 3))}),
         ValueError, r"batch\['cond'\] must have shape \(4, C\)"),
    Case("flow_matching/negative_sde_sigma", lambda: fm.sample_sde(
        lambda t, x: -x, jnp.zeros((2, 2)), jax.random.PRNGKey(0), sigma=-1.0),
         ValueError, r"sigma must be finite and >= 0"),
    Case("flow_matching/zero_ode_steps", lambda: fm.sample_ode(lambda t, x: -x, jnp.zeros((2, 2)),
                                                               num_steps=0),
         ValueError, r"num_steps must be an int >= 1, got 0"),
    Case("flow_matching/zero_cov_min", lambda: fm.rotated_gaussian(jax.random.PRNGKey(0), 3,
                                                                   cov_min=0.0),
         ValueError, r"cov_min must be finite and > 0"),
    Case("flow_matching/zero_sinkhorn_eps", lambda: fm.sinkhorn_divergence(
        jnp.zeros((3, 2)), jnp.ones((3, 2)), eps=0.0),
         ValueError, r"eps must be finite and > 0"),
    Case("flow_matching/mixture_weights_not_summing_to_one", lambda: fm.mixture_sample(
        jax.random.PRNGKey(0), fm_closed_form.GaussianMixture(
            jnp.array([0.5, 0.7]), jnp.zeros((2, 2)), jnp.stack([jnp.eye(2)] * 2)), 5),
         ValueError, r"target.weights must be non-empty, >= 0 and sum to 1"),
    Case("flow_matching/p_uncond_above_one", lambda: fm.make_loss_fn(lambda *a: 0.0, p_uncond=1.5),
         ValueError, r"p_uncond must be finite and in \[0, 1\], got 1.5"),
    Case("flow_matching/kl_dimension_mismatch", lambda: fm.gaussian_kl(
        fm_closed_form.Gaussian(jnp.zeros(2), jnp.eye(2)),
        fm_closed_form.Gaussian(jnp.zeros(3), jnp.eye(3))),
         ValueError, r"p and q must have the same dimension, got 2 and 3"),
    Case("divin/negative_langevin_step", lambda: divin.sample_classes(
        None, jax.random.PRNGKey(0), 3.0, 0.5, 0.0, 0.0, -0.1, apply_fn=lambda p, t, x, c: x,
        method="divin", shape=(4, 2), num_classes=2, num_steps=4, divin_steps=2,
        rollout_steps=1),
         ValueError, r"eta must be finite and > 0, got -0.1"),
    Case("divin/empty_cads_window", lambda: divin.cads_field(
        lambda p, t, x, c: x, None, jnp.zeros((2, 2)), 1.0, jax.random.PRNGKey(0),
        num_steps=4, t1=0.5, t2=0.5),
         ValueError, r"CADS window \(t1, t2\) must satisfy 0 <= t1 < t2 <= 1"),
    Case("divin/knn_k_too_large", lambda: divin_metrics.density_coverage(
        jnp.zeros((5, 2)), jnp.zeros((3, 2)), k=5),
         ValueError, r"k must be an int in \[1, N - 1\] = \[1, 4\]"),
    Case("divin/negative_label", lambda: divin.dataset_batch(
        0, 0, x=np.zeros((4, 2)), labels=np.full(4, -1), num_classes=3, batch_size=2),
         ValueError, r"labels must lie in \[0, num_classes\) = \[0, 3\), got -1"),
    Case("divin/zero_mode_weights", lambda: divin.ring_modes(3, (0.0, 0.0), 5.0),
         ValueError, r"mode_weights must be a non-empty list of finite weights"),
]


# --- SGLD/LLC susceptibilities, unlearning and CGFM.

_QUAD = lambda w, batch: jnp.sum(w ** 2)

ROWS_SAMPLERS_GRAPHS = [
    Case("susceptibility/llc_negative_num_burnin",
         lambda: sus.estimate_llc(jnp.ones((2, 5)), 0.0, 1.0, num_burnin=-1),
         ValueError, r"num_burnin=-1"),
    Case("susceptibility/init_loss_zero_batches",
         lambda: sus.init_loss(_QUAD, jnp.ones(2), lambda s: None, 0),
         ValueError, r"num_batches=0"),
    Case("susceptibility/sgld_infinite_n_beta",
         lambda: sus.sgld(1e-3, float("inf"), 1.0, key=_KEY),
         ValueError, r"n_beta=inf"),
    Case("susceptibility/run_chains_integer_params",
         lambda: sus.run_chains(_QUAD, jnp.zeros(2, jnp.int32), lambda s: None, _KEY,
                                step_size=1e-3, n_beta=1.0, localization=1.0, num_draws=2),
         TypeError, r"params leaf .*int32"),
    Case("susceptibility/run_chains_mask_structure",
         lambda: sus.run_chains(lambda w, b: jnp.sum(w["a"] ** 2), {"a": jnp.zeros(2)},
                                lambda s: None, _KEY, step_size=1e-3, n_beta=1.0,
                                localization=1.0, num_draws=2, mask={"b": jnp.ones(2)}),
         ValueError, r"mask has tree structure"),
    Case("susceptibility/linear_regression_fewer_samples_than_dim",
         lambda: sus.linear_regression(_KEY, dim=5, n=3, batch_size=2, noise=1.0),
         ValueError, r"n=3.*>= 5"),
    Case("susceptibility/linear_regression_zero_noise",
         lambda: sus.linear_regression(_KEY, dim=2, n=10, batch_size=2, noise=0.0),
         ValueError, r"noise=0.0"),
    Case("susceptibility/step_size_sweep_negative_eps",
         lambda: sus.step_size_sweep(_QUAD, jnp.zeros(2), lambda s: None, _KEY, [-1e-3],
                                     n_beta=1.0, localization=1.0, num_draws=2),
         ValueError, r"step_sizes=.*> 0"),
    Case("susceptibility/diagnose_one_dimensional_trace",
         lambda: sus.diagnose(np.ones(10), 0.0, 1.0),
         ValueError, r"loss_trace must be \(chains, steps\)"),
    Case("susceptibility/diagnose_burnin_past_the_end",
         lambda: sus.diagnose(np.ones((2, 10)), 0.0, 1.0, num_burnin=10),
         ValueError, r"num_burnin=10"),
    Case("susceptibility/mala_acceptance_zero_step",
         lambda: sus.mala_acceptance(jnp.ones((2, 10)), 0.0),
         ValueError, r"step_size=0.0"),
    Case("susceptibility/knn_graph_nan_features",
         lambda: sus.knn_graph(np.array([[0.0, np.nan], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]), 2),
         ValueError, r"features has a non-finite value nan at index \(0, 1\)"),
    Case("unlearning/make_task_nan_inputs",
         lambda: unlearning_objective.make_task(np.array([[0.0], [np.nan]]), np.array([0, 1])),
         ValueError, r"x has a non-finite value at index \(1, 0\)"),
    Case("unlearning/make_task_negative_weight",
         lambda: unlearning_objective.make_task(np.zeros((3, 1)), np.zeros(3), w=[1.0, -1.0, 1.0]),
         ValueError, r"w has a negative weight at index 1"),
    Case("unlearning/gaussian_sigma_nan_bound",
         lambda: certificate.gaussian_sigma(float("nan"), 1.0, 1e-5),
         ValueError, r"bound=nan"),
    Case("unlearning/stage_bound_zero_strong_convexity",
         lambda: certificate.stage_bound(1.0, 0.0, lam=0.0, mu=0.0),
         ValueError, r"lam=0.0, mu=0.0"),
    Case("unlearning/auc_empty_scores",
         lambda: unlearning_metrics.auc(np.array([]), np.array([1.0])),
         ValueError, r"member_scores has shape \(0,\)"),
    Case("cgfm/pool_assign_out_of_range",
         lambda: cgfm.pool(jnp.ones((4, 2)), jnp.array([0, 1, 5, 1]), 2),
         ValueError, r"assign\[2\]=5 is out of range"),
    Case("cgfm/unpool_negative_assign",
         lambda: cgfm.unpool(jnp.ones((2, 2)), jnp.array([0, -1, 1])),
         ValueError, r"assign\[1\]=-1"),
    Case("cgfm/wasserstein_trailing_shape_mismatch",
         lambda: cgfm.wasserstein1_1d(np.ones((5, 3)), np.ones((5, 4))),
         ValueError, r"x \(5, 3\) and y \(5, 4\)"),
]


# --- Reinforcement learning: GRPO (common/rl) and the AdaThink rewards.

_ADATHINK_TASK = adathink.make_task(0, cases_per_k=4, max_k=2)


def _rl_carry_train(carry, batch_fn=None):
  config = train_lib.default_train_config(num_steps=1, batch_size=4, progress_bar=False)
  return train_lib.train(
      init_fn=lambda key: {"w": jnp.zeros(3)},
      loss_fn=lambda params, batch, key: (jnp.sum(params["w"] ** 2), {}),
      batch_fn=batch_fn or (lambda seed, step, c: ({"x": np.zeros((4, 3))}, c)),
      optimizer=optax.sgd(0.1), config=config, workdir=_scratch(), carry=carry)

ROWS_RL = [
    Case("grpo/group_size_one", lambda: rl.GRPOConfig(group_size=1), ValueError,
         r"GRPOConfig.group_size must be an int >= 2, got 1"),
    Case("grpo/clip_low_zero", lambda: rl.GRPOConfig(clip_low=0.0), ValueError,
         r"GRPOConfig.clip_low must be in \(0, 1\), got 0.0"),
    Case("grpo/clip_high_one", lambda: rl.GRPOConfig(clip_high=1.0), ValueError,
         r"GRPOConfig.clip_high must be in \(0, 1\), got 1.0"),
    Case("grpo/unknown_loss_agg", lambda: rl.GRPOConfig(loss_agg="x"), ValueError,
         r"GRPOConfig.loss_agg must be one of"),
    Case("grpo/aggregate_unknown_mode",
         lambda: rl.aggregate(np.zeros((2, 3)), np.ones((2, 3)), "sum"), ValueError,
         r"mode must be one of .* got 'sum'"),
    Case("grpo/rewards_not_a_multiple_of_the_group",
         lambda: rl.group_advantages(np.zeros(6), 4), ValueError,
         r"rewards has 6 entries, not a multiple of group_size 4"),
    Case("adathink/unknown_reward", lambda: adathink.get_reward("nope"), ValueError,
         r"unknown reward 'nope'; expected one of"),
    Case("adathink/reward_fn_group_of_one",
         lambda: adathink_training.make_reward_fn("adathink", 1), ValueError,
         r"group_size must be an int >= 2, got 1"),
    Case("adathink/sft_answer_only_fraction_above_one",
         lambda: adathink_training.sft_batch(_ADATHINK_TASK, 0, 0, 4, 64,
                                             answer_only_fraction=1.5), ValueError,
         r"answer_only_fraction must be .*1.5"),
    Case("train/carry_leaf_not_an_array",
         lambda: _rl_carry_train({"ema": "x"}), TypeError,
         r"carry\['ema'\] must be an array or number, got str"),
    Case("train/carry_batch_fn_returns_no_pair",
         lambda: _rl_carry_train({"ema": 0.0}, lambda seed, step, c: {"x": np.zeros((4, 3))}),
         TypeError, r"must return \(batch, carry\) when train\(..., carry=\) is given"),
]


# --- Text models: the HTTP client, spec strings, chat messages, the server's app.

def _server_app(**kwargs):
  from common.llm import server  # pylint: disable=import-outside-toplevel
  return server.make_app(object(), model_name="m", **kwargs)


_HTTP = llm.HTTPTextModel("http://127.0.0.1:9/v1", model="m")

ROWS_LLM = [
    Case("llm/http_base_url_without_scheme", lambda: llm.HTTPTextModel("localhost:8000/v1"),
         ValueError, r"base_url must start with http:// or https://.*got 'localhost:8000/v1'"),
    Case("llm/http_unknown_endpoint",
         lambda: llm.HTTPTextModel("http://127.0.0.1:9/v1", endpoint="responses"), ValueError,
         r"endpoint must be one of \('completions', 'chat'\), got 'responses'"),
    Case("llm/http_zero_timeout", lambda: llm.HTTPTextModel("http://127.0.0.1:9/v1", timeout=0),
         ValueError, r"timeout must be a finite number >= 0.001, got 0"),
    Case("llm/http_negative_retries",
         lambda: llm.HTTPTextModel("http://127.0.0.1:9/v1", max_retries=-1), ValueError,
         r"max_retries must be an int >= 0, got -1"),
    Case("llm/http_stop_is_a_string",
         lambda: _HTTP.complete(["hi"], max_tokens=2, stop="\n"), ValueError, r"stop must be"),
    Case("llm/http_chat_unknown_role",
         lambda: _HTTP.chat([[("robot", "hi")]], max_tokens=2), ValueError,
         r"conversations\[0\]: messages\[0\] must be \(role in"),
    Case("llm/spec_unknown_form", lambda: llm.text_model_from_spec("simulated"), ValueError,
         r"text model spec 'simulated' is not recognised; expected one of http://"),
    Case("llm/check_messages_empty", lambda: llm.check_messages([]), ValueError,
         r"messages is empty"),
    Case("llm/server_unknown_chat_template", lambda: _server_app(chat_template="alpaca"),
         ValueError, r"unknown chat template 'alpaca'"),
    Case("llm/server_zero_batch_size", lambda: _server_app(batch_size=0), ValueError,
         r"batch_size must be an int >= 1, got 0"),
]


def _jsonl(text: str) -> str:
  fd, path = tempfile.mkstemp(suffix=".jsonl")
  with os.fdopen(fd, "w") as f:
    f.write(text)
  return path


_POINTS = np.random.default_rng(0).random((10, 2))
_VS = lilo_problems.PROBLEMS["vehicle_safety"]
_ARMS = {0: np.array([0.1, 0.2, 0.3]), 1: np.array([0.2, 0.3, 0.4])}

# The LLM-in-the-loop methods: the experience library (TSGD) and LILO.
ROWS_LLM_METHODS = [
    Case("experience_library/capacity_below_one", lambda: el.new_library(0, 100), ValueError,
         r"capacity K must be an int >= 1, got 0"),
    Case("experience_library/rule_longer_than_the_context",
         lambda: el.new_library(4, 50, ["r" * 80]), ValueError,
         r"rules\[0\] has 80 characters, longer than the solver's context allows"),
    Case("experience_library/add_at_capacity",
         lambda: el.apply(el.new_library(1, 50, ["a"]), el.Operation("add", "b")), ValueError,
         r"add at capacity K=1: an Add must come with a Delete"),
    Case("experience_library/delete_of_a_missing_rule",
         lambda: el.apply(el.new_library(2, 50, ["a"]), el.Operation("delete", index=4)),
         ValueError, r"delete names rule 5, but the library has 1 rules"),
    Case("experience_library/jsonl_without_answer",
         lambda: el.load_problems_jsonl(_jsonl('{"problem": "1+1?"}\n')), ValueError,
         r"\.jsonl:1: expected an object with non-empty 'problem' and 'answer' fields"),
    Case("experience_library/retrieve_k_zero", lambda: el.retrieve(["a rule"], [], k=0),
         ValueError, r"k must be >= 1, got 0"),
    Case("experience_library/solver_eps_out_of_range", lambda: el.SimulatedSolver(eps=1.5),
         ValueError, r"eps must be in \[0, 1\), got 1.5"),
    Case("lilo/comparison_of_an_unknown_point",
         lambda: lilo_gp.fit_pairwise_gp(_POINTS, np.array([[0, 12]])), ValueError,
         r"comparison 0 references point 12, but there are 10 points"),
    Case("lilo/comparison_of_a_point_with_itself",
         lambda: lilo_gp.fit_pairwise_gp(_POINTS, np.array([[3, 3]])), ValueError,
         r"comparison 0 compares point 3 with itself"),
    Case("lilo/non_finite_outcome",
         lambda: lilo_problems.utility(_VS, np.array([[0.1, np.nan, 0.3]])), ValueError,
         r"Y has a non-finite value nan at index \(0, 1\)"),
    Case("lilo/translate_an_unknown_arm",
         lambda: lilo_translator.translate(lilo_simulated.OfflineTranslator(), _VS, [], _ARMS,
                                           np.array([[0, 5]])), ValueError,
         r"pairs\[0\] = \(0, 5\) references unknown arm 5"),
    Case("lilo/acquisition_more_restarts_than_samples",
         lambda: lilo_acquisition.optimize_acqf(lambda X: X.sum(), 1, 2, jax.random.PRNGKey(0),
                                                raw_samples=2, restarts=3), ValueError,
         r"restarts \(3\) must be <= raw_samples \(2\)"),
]


def _fr_model(vocab=32, d=16):
  return lm_tfm.Transformer(lm_tfm.llama_config(vocab_size=vocab, d_model=d, num_layers=1,
                                                num_heads=2, d_ff=32, max_seq_len=16))


def _fr_router(vocab=32, d=8, e=2):
  return fr.Router(lm_tfm.llama_config(vocab_size=vocab, d_model=d, num_layers=1,
                                       num_heads=2, d_ff=16, max_seq_len=16), e)


def _fr_config(**overrides):
  return _tiny_config("fusion_route", **overrides)


def _tiny_config(name: str, **overrides):
  """The experiment's tiny config with `overrides` ("key" or "group.key": value)."""
  import importlib
  config = importlib.import_module(f"experiments.configs.{name}").get_config("tiny")
  for key, value in overrides.items():
    head, _, tail = key.partition(".")
    if tail:
      config[head][tail] = value
    else:
      config[key] = value
  return config


def _fr_big_router():
  from experiments import fusion_route as fr_experiment
  return fr_experiment.make_models(_fr_config(**{"router.d_model": 64, "router.d_ff": 512}))


def _fr_preflight_missing():
  from experiments.configs import fusion_route as fr_configs
  return fr_configs.preflight(_fr_config(**{"paper.expert_checkpoints": ("/nonexistent/a",
                                                                         "/nonexistent/b"),
                                            "paper.router_checkpoint": "/nonexistent/r"}))


ROWS_FUSION_ROUTE = [
    Case("fusion_route/experts_with_different_vocabularies",
         lambda: fr.make_ensemble((_fr_model(32), _fr_model(40)), _fr_router()), ValueError,
         r"the experts have different vocabularies \(sizes \[32, 40\]\)"),
    Case("fusion_route/one_expert",
         lambda: fr.make_ensemble((_fr_model(),), _fr_router(e=1)), ValueError,
         r"FusionRoute needs E >= 2 experts, got 1"),
    Case("fusion_route/config_with_one_domain",
         lambda: configs_validate_fr(_fr_config(experts=("prose",))), config_lib.ConfigError,
         r"config.experts=.*at least 2 domains"),
    Case("fusion_route/router_larger_than_the_experts", _fr_big_router, ValueError,
         r"the router has \d+ parameters, not fewer than expert 0's \d+"),
    Case("fusion_route/missing_expert_checkpoint", _fr_preflight_missing,
         config_lib.ConfigError,
         r"paper.router_checkpoint='/nonexistent/r' is invalid: expected a local HF folder"),
    Case("fusion_route/router_for_another_vocabulary",
         lambda: fr.make_ensemble((_fr_model(), _fr_model()), _fr_router(vocab=40)),
         ValueError, r"the router's vocabulary has 40 tokens, the experts' 32"),
    Case("dpo/beta_zero", lambda: rl.dpo.DPOConfig(beta=0.0), ValueError,
         r"DPOConfig.beta must be finite and > 0, got 0.0"),
    Case("dpo/batch_without_reference",
         lambda: rl.dpo.make_loss_fn(lambda p, t: t)(None, {"chosen": np.zeros((1, 3), int)},
                                                     None), ValueError,
         r"batch is missing keys \['rejected'"),
]


def _glance_validate(**overrides):
  from experiments.configs import glance as glance_configs
  glance_configs.validate(_tiny_config("glance", **overrides))


def _glance_curiosity(**settings):
  from methods.glance import curiosity, envs as glance_envs
  spec = glance_envs.EnvSpec("MiniGrid-DoorKey-5x5", 6, (7, 7, 2), 7, 250)
  return curiosity.make_curiosity("glance", spec, {}, jax.random.PRNGKey(0),
                                  curiosity.CuriosityConfig(**settings))


def _glance_env(name, observation="symbolic"):
  from methods.glance import envs as glance_envs
  return glance_envs.make_env(name, observation)


ROWS_GLANCE = [
    Case("glance/unknown_environment", lambda: _glance_env("MiniGrid-Nope"), ValueError,
         r"unknown environment 'MiniGrid-Nope'; expected one of .*MiniGrid-DoorKey-5x5"),
    Case("glance/config_unknown_environment",
         lambda: _glance_validate(envs=("MiniGrid-DoorKey-5x5", "DoorKey")),
         config_lib.ConfigError, r"config.envs=.*DoorKey.*xminigrid environment names "
         r"\(valid: .*MiniGrid-MemoryS8"),
    Case("glance/rollout_not_divisible_into_minibatches",
         lambda: rl.ppo.PPOConfig(num_envs=3, num_steps=5, num_minibatches=4), ValueError,
         r"num_envs x num_steps = 3 x 5 = 15 transitions does not split into "
         r"num_minibatches=4"),
    Case("glance/config_rollout_not_divisible",
         lambda: _glance_validate(**{"ppo.num_minibatches": 3}), config_lib.ConfigError,
         r"config.ppo.num_minibatches=3 .*a divisor of ppo.num_envs x ppo.num_steps = 128"),
    Case("glance/negative_beta", lambda: _glance_curiosity(beta=-0.1), ValueError,
         r"beta must be finite and >= 0, got -0.1"),
    Case("glance/config_negative_beta", lambda: _glance_validate(**{"curiosity.beta": -1.0}),
         config_lib.ConfigError, r"config.curiosity.beta=-1.0 .*a number >= 0"),
    Case("glance/image_observations",
         lambda: _glance_env("MiniGrid-DoorKey-5x5", "image"), ValueError,
         r"observation='image': MiniGrid-DoorKey-5x5 has no image observations"),
    Case("glance/config_image_observations", lambda: _glance_validate(observation="image"),
         config_lib.ConfigError, r"config.observation='image' .*MiniGrid-DoorKey-5x5 give "
         r"the agent no image observations"),
]


def _fgr_images(shape=(2, 8, 8, 1), dtype=jnp.float32):
  return jnp.zeros(shape, dtype)


def _fgr_corrupt(images=None, name="gaussian_noise", severity=1):
  from common.data import corruptions
  return corruptions.corrupt(jax.random.PRNGKey(0), _fgr_images() if images is None else images,
                             name, severity)


def _fgr_cifar_c(tmp_shape=None):
  """A CIFAR-C folder with one corruption file of shape `tmp_shape` (None: no file)."""
  from common.data import cifar
  root = _scratch(prefix="cifar_c_")
  np.save(os.path.join(root, "labels.npy"), np.zeros(10, np.uint8))
  if tmp_shape is not None:
    np.save(os.path.join(root, "fog.npy"), np.zeros(tmp_shape, np.uint8))
  return cifar.load_cifar_c(root, "fog", 1)


def _fgr(fn_name, *args, **kwargs):
  from methods import fgr
  return getattr(fgr, fn_name)(*args, **kwargs)


ROWS_FGR = [
    Case("fgr/rho_above_one",
         lambda: _fgr("lowpass_views", jax.random.PRNGKey(0), _fgr_images(), 1.5), ValueError,
         r"rho must be finite and in \[0, 1\], got 1.5"),
    Case("fgr/rho_negative",
         lambda: _fgr("epoch_selection", jax.random.PRNGKey(0), 100, -0.05), ValueError,
         r"rho must be finite and in \[0, 1\], got -0.05"),
    Case("fgr/cutoff_above_nyquist", lambda: _fgr("fft_lowpass", _fgr_images(), 1.5),
         ValueError, r"ratio=1.5 gives a cutoff radius 6 larger than the Nyquist radius 4 of "
         r"8x8 images; expected ratio in \(0, 1\]"),
    Case("fgr/mask_radius_above_nyquist", lambda: _fgr("gaussian_lowpass_mask", 8, 16, 5.0),
         ValueError, r"cutoff radius=5 is larger than the Nyquist radius 4 of 8x16 images"),
    Case("fgr/unknown_filter", lambda: _fgr("make_filter", "median"), ValueError,
         r"unknown filter 'median'; expected one of jpeg_compression, fft_lowpass"),
    Case("fgr/unknown_corruption", lambda: _fgr_corrupt(name="fog"), ValueError,
         r"unknown corruption 'fog'; expected one of gaussian_noise, shot_noise, .*"
         r"jpeg_compression"),
    Case("fgr/severity_zero", lambda: _fgr_corrupt(severity=0), ValueError,
         r"severity=0; expected an int in 1..5"),
    Case("fgr/severity_six", lambda: _fgr("make_filter", "fft_lowpass", (1, 6)), ValueError,
         r"severity=6; expected an int in 1..5"),
    Case("fgr/channels_first", lambda: _fgr_corrupt(_fgr_images((2, 3, 32, 32))), ValueError,
         r"images has shape \(2, 3, 32, 32\); expected NHWC .* with 1 or 3 channels last "
         r"\(channels first\? move them last\)"),
    Case("fgr/unbatched_image", lambda: _fgr("fft_lowpass", _fgr_images((8, 8, 1)), 0.5),
         ValueError, r"images has shape \(8, 8, 1\); expected NHWC"),
    Case("fgr/uint8_images",
         lambda: _fgr_corrupt(_fgr_images(dtype=jnp.uint8)), TypeError,
         r"images has dtype uint8; expected floats in \[0, 1\]"),
    Case("fgr/cifar_c_missing_file", lambda: _fgr_cifar_c(None), FileNotFoundError,
         r"CIFAR-C corruption 'fog': .*fog.npy' is missing"),
    Case("fgr/cifar_c_wrong_shape", lambda: _fgr_cifar_c((10, 28, 28, 3)), ValueError,
         r"fog.npy' has shape \(10, 28, 28, 3\) and dtype uint8; expected \(5 n, 32, 32, 3\)"),
    Case("fgr/rectify_trees_differ",
         lambda: _fgr("rectify_grads", {"head": jnp.ones(2)}, {"fc": jnp.ones(2)}), ValueError,
         r"constraint_grads has tree structure .*; expected that of grads"),
    Case("fgr/rectify_unknown_scope",
         lambda: _fgr("fgr_rectify", scope="backbone"), ValueError,
         r"scope='backbone'; expected one of \('head', 'all'\)"),
]


def configs_validate_fr(config):
  from experiments.configs import fusion_route as fr_configs
  fr_configs.validate(config)


def _ip_validate(**overrides):
  from experiments.configs import interactive_proofs as ip_configs
  ip_configs.validate(_tiny_config("interactive_proofs", **overrides))


def _ip_sumcheck_statement(degree):
  from methods.interactive_proofs import sumcheck
  with jax.enable_x64(True):
    tables = jnp.zeros((1, degree, 8), jnp.int64)
    sumcheck.check_statement(sumcheck.ProductSum(tables, jnp.ones((1,), jnp.int64)), 3)


def _ip_field(p):
  from methods.interactive_proofs import PrimeField
  return PrimeField(p)


def _ip_circuit(ops, n):
  from methods.interactive_proofs import gkr
  return gkr.check_circuit(ops, n)


ROWS_INTERACTIVE_PROOFS = [
    Case("interactive_proofs/p_not_prime", lambda: _ip_field(91), ValueError,
         r"p=91 is not prime"),
    Case("interactive_proofs/p_too_large", lambda: _ip_field(2**31 + 11), ValueError,
         r"p=2147483659 is too large for the word size"),
    Case("interactive_proofs/degree_above_protocol", lambda: _ip_sumcheck_statement(5),
         ValueError, r"degree 5 in each variable; the protocol was set up for degree <= 3"),
    Case("interactive_proofs/unknown_gate", lambda: _ip_circuit(("xor",), 4), ValueError,
         r"gate ops must be in \('add', 'mul'\), got \['xor'\]"),
    Case("interactive_proofs/config_prime_not_prime", lambda: _ip_validate(prime=2**31 - 3),
         config_lib.ConfigError, r"config.prime=2147483645 is invalid: expected a prime below"),
    Case("interactive_proofs/config_small_field_for_degree",
         lambda: _ip_validate(**{"soundness.prime": 5}), config_lib.ConfigError,
         r"soundness.prime=5 .*expected a prime > soundness.degree \+ 2 = 5"),
]


_RHO_NAN = np.full((4, 4), 0.5)
_RHO_NAN[1, 2] = np.nan
_RHO_HIGH = np.full((4, 4), 0.5)
_RHO_HIGH[0, 3] = 1.5

ROWS_PHYSICS = [
    Case("physics/rho_nan", lambda: physics.homogenize(_RHO_NAN), ValueError,
         r"rho has a non-finite value nan at index \(1, 2\)"),
    Case("physics/rho_above_one", lambda: physics.homogenize(_RHO_HIGH), ValueError,
         r"rho\[0, 3\] = 1.5 is outside \[0, 1\]"),
    Case("physics/rho_not_square", lambda: physics.homogenize(np.ones((4, 6))), ValueError,
         r"rho must be a square \(n, n\) grid .*n >= 4.*got shape \(4, 6\)"),
    Case("physics/mesh_too_small", lambda: physics.elastic_tensor(np.ones((3, 3))),
         ValueError, r"rho must be a square \(n, n\) grid .*n >= 4.*got shape \(3, 3\)"),
    Case("physics/void_modulus_zero", lambda: physics.homogenize(
        np.ones((4, 4)), physics.Material(E_void=0.0)), ValueError,
         r"material.E_void must be finite and > 0, got 0.0"),
    Case("physics/poisson_ratio_half", lambda: physics.conductivity_tensor(
        np.ones((4, 4)), physics.Material(nu=0.5)), ValueError,
         r"material.nu must be in \(-1, 0.5\), got 0.5"),
    Case("physics/unknown_preconditioner", lambda: physics.homogenize(
        np.ones((4, 4)), preconditioner="ilu"), ValueError,
         r"preconditioner='ilu'; expected one of \('multigrid', 'fft'\)"),
]


def _automs():
  from methods import automs  # pylint: disable=import-outside-toplevel
  return automs


ROWS_AUTOMS = [
    Case("automs/empty_box", lambda: _automs().tasks.make_task("t", ()), ValueError,
         r"task 't': the constraint box is empty"),
    Case("automs/inverted_box", lambda: _automs().tasks.make_task(
        "t", (_automs().Constraint("nu12", -0.1, -0.3),)), ValueError,
         r"task 't': the box for nu12 is empty: \[-0.1, -0.3\]; expected lo <= hi"),
    Case("automs/unknown_family", lambda: _automs().Simulator(("honeycomb",)), ValueError,
         r"unknown cell family 'honeycomb'; expected one of \('rods'"),
    Case("automs/mesh_too_small", lambda: _automs().Simulator(("rods",), n=6), ValueError,
         r"mesh size n must be >= 8 for the cell families, got 6"),
]


def _tap():
  from methods import tap_sampling  # pylint: disable=import-outside-toplevel
  return tap_sampling


def _lerobot_mismatch():
  """A LeRobot dataset whose episode 2 was rewritten with 7-D actions."""
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  from common.data import lerobot  # pylint: disable=import-outside-toplevel
  path = os.path.join(_scratch(), "ds")
  episode = {"observation.state": np.zeros((4, 3), np.float32),
             "action": np.zeros((4, 2), np.float32)}
  lerobot.write_lerobot(path, [episode] * 3)
  file = os.path.join(path, "data", "chunk-000", "episode_000002.parquet")
  table = pq.read_table(file)
  wide = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(table.num_rows * 7, np.float32)), 7)
  pq.write_table(table.set_column(table.column_names.index("action"), "action", wide), file)
  return lerobot.load_lerobot(path)


def _envs_make(name):
  from common import envs  # pylint: disable=import-outside-toplevel
  return envs.make(name)


ROWS_TAP_SAMPLING = [
    Case("tap_sampling/unknown_env", lambda: _envs_make("fly"), ValueError,
         r"unknown env 'fly'; expected one of push, reach"),
    Case("tap_sampling/unknown_policy", lambda: _tap().make_policy("mlp", 10, 2), ValueError,
         r"unknown policy 'mlp'; expected one of \('flow', 'gaussian'\)"),
    Case("tap_sampling/fewer_candidates_than_proposals", lambda: _tap().sampler.check_config(
        _tap().SamplerConfig("tap", num_policy=4, total=3)), ValueError,
         r"candidate count total=3 must be >= num_policy \(N\) = 4"),
    Case("tap_sampling/threshold_above_one", lambda: _tap().thres_weighted_merge(
        jnp.zeros((2, 3, 2)), jnp.zeros(2), 1.5), ValueError,
         r"threshold must be finite and in \[0, 1\], got 1.5"),
    Case("tap_sampling/threshold_below_zero", lambda: _tap().sampler.check_config(
        _tap().SamplerConfig("tap", threshold=-0.2)), ValueError,
         r"threshold must be finite and in \[0, 1\], got -0.2"),
    Case("tap_sampling/lerobot_action_dims", _lerobot_mismatch, ValueError,
         r"episode 2 has action dimension 7, expected 2 \(from episode 0\)"),
]


def _tables():
  from common.data import tables  # pylint: disable=import-outside-toplevel
  return tables


def _csv(text: str) -> str:
  path = os.path.join(_scratch(), "table.csv")
  with open(path, "w") as f:
    f.write(text)
  return path


def _schema(**overrides):
  fields = dict(numeric=("age",), categorical=("city",), target="city")
  return _tables().Schema(**{**fields, **overrides})


def _many_categories():
  frame = pd.DataFrame({"age": np.arange(70.0), "city": [f"c{i}" for i in range(70)]})
  _tables().TableEncoder.fit(_tables().Table("t", frame, _schema()), max_categories=64)


def _qtab():
  from methods import qtab  # pylint: disable=import-outside-toplevel
  return qtab


ROWS_QTAB = [
    Case("qtab/schema_column_missing_from_csv", lambda: _tables().load_csv(
        _csv("age,town\n3,a\n"), _schema()), ValueError,
         r"column 'city' named by the schema is not in .*table.csv"),
    Case("qtab/non_numeric_cell", lambda: _tables().load_csv(
        _csv("age,city\n3,a\nold,b\n"), _schema()), ValueError,
         r"numeric column 'age' of .* has the non-numeric value 'old'"),
    Case("qtab/too_many_categories", _many_categories, ValueError,
         r"column 'city' has 70 categories, more than max_categories=64"),
    Case("qtab/fewer_rows_than_batch", lambda: _tables().check_rows(_tables().Table(
        "t", pd.DataFrame({"age": [1.0], "city": ["a"]}), _schema()), 64), ValueError,
         r"table 't' has 1 rows, fewer than the batch size 64"),
    Case("qtab/target_not_a_column", lambda: _schema(target="income"), ValueError,
         r"target 'income' is not among the numeric or categorical"),
    Case("qtab/unknown_corruption", lambda: _qtab().tokenizer.check_config(
        _qtab().tokenizer.TokenizerConfig(corruption="everywhere")), ValueError,
         r"corruption must be one of \('none', 'uniform', 'fine', 'coarse'\), got 'everywhere'"),
]


def _token_fusion():
  from methods import token_fusion  # pylint: disable=import-outside-toplevel
  return token_fusion


def _fusion_folder_with_notes() -> str:
  from common.data import fusion_images  # pylint: disable=import-outside-toplevel
  root = _scratch()
  image = np.zeros((1, 8, 8), np.float32)
  fusion_images.write_fusion_folder(root, image, image, ["00001"])
  with open(os.path.join(root, "vi", "notes.txt"), "w") as f:
    f.write("not an image")
  return fusion_images.load_fusion_folder(root)


def _sources_of_different_sizes():
  tf = _token_fusion()
  params = tf.fusion.init(jax.random.key(0), tf.BackboneConfig(4, 1), 16)
  tf.fusion.apply(params, jnp.zeros((1, 16, 16)), jnp.zeros((1, 16, 20)), tf.BackboneConfig(4, 1))


ROWS_TOKEN_FUSION = [
    Case("token_fusion/sources_of_different_sizes", _sources_of_different_sizes, ValueError,
         r"source images a and b must have the same shape, got \(1, 16, 16\) and \(1, 16, 20\)"),
    Case("token_fusion/non_image_file_in_dataset", _fusion_folder_with_notes, ValueError,
         r"vi/notes.txt: not an image file"),
    Case("token_fusion/patch_size_does_not_divide", lambda: _token_fusion().tokenizer.encode(
        None, jnp.zeros((1, 18, 18)), _token_fusion().TokenizerConfig(18, patch_size=4)),
         ValueError, r"image size 18x18 is not divisible by the patch size 4"),
    Case("token_fusion/budget_above_tokens", lambda: _token_fusion().ste.fixed_mask(
        "probe", 32, 40, range(40)), ValueError, r"token budget 40 must be in \[0, K = 32\]"),
]


CASES: list[Case] = [*ROWS_RUNS, *ROWS_LOADERS, *ROWS_LM, *ROWS_REGRESSION_FLOWS,
                      *ROWS_SAMPLERS_GRAPHS, *ROWS_RL, *ROWS_LLM, *ROWS_LLM_METHODS,
                      *ROWS_FUSION_ROUTE, *ROWS_GLANCE, *ROWS_FGR,
                      *ROWS_INTERACTIVE_PROOFS, *ROWS_PHYSICS, *ROWS_AUTOMS,
                      *ROWS_TAP_SAMPLING, *ROWS_QTAB, *ROWS_TOKEN_FUSION]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_input_gets_a_clear_error(case):
  with pytest.raises(case.error, match=case.match):
    case.call()


def test_the_table_is_large_and_names_are_unique():
  names = [c.name for c in CASES]
  assert len(names) == len(set(names))
  assert len(CASES) >= 40
