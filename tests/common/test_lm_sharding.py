"""Tests of the LM's parameter sharding (common/partitioning.py, `config.mesh` in the loop).

In-process: the rules table, the logical names the transformer gives its parameters,
the mesh config's validation, and that boxed names leave the param tree unchanged.
Run as a script (`python tests/common/test_lm_sharding.py OUT.json WORKDIR`) this
file does the 8-device checks and writes what it measured; one subprocess with 8
fake CPU devices runs it for the module, and the tests below assert on its output:
a sharded forward pass, cached greedy decoding and AGZO steps through
`common.train` equal the replicated ones, and per-device parameter bytes drop by
the sharding factor.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from common import partitioning, sharding
from common import train as train_lib
from common.models import transformer as tfm

CONFIG = tfm.TransformerConfig(family="llama", vocab_size=64, d_model=32, num_layers=1,
                               num_heads=4, num_kv_heads=2, d_ff=64, max_seq_len=32)
MESH = {"data": 2, "fsdp": 2, "tensor": 2}
BATCH, SEQ, NEW = 8, 8, 4


# ---------------------------------------------------------------- in-process unit tests
def test_transformer_params_carry_logical_names_and_stay_plain():
  model = tfm.Transformer(CONFIG)
  axes = tfm.logical_axes(model)
  assert axes["embed"]["embedding"] == P("vocab", "embed")
  attn = axes["layer_0"]["attn"]
  assert attn["q_proj"]["kernel"] == P("embed", "heads")
  assert attn["k_proj"]["kernel"] == P("embed", "kv_heads")
  assert attn["o_proj"]["kernel"] == P("heads", "embed")
  assert axes["layer_0"]["mlp"]["down_proj"]["kernel"] == P("mlp", "embed")
  assert axes["lm_head"]["kernel"] == P("embed", "vocab")
  assert axes["final_norm"]["scale"] == P("norm")
  params = tfm.init_params(model, jax.random.PRNGKey(0))
  # init_params gives plain arrays, the tree HF import/export and checkpoints see.
  assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(params))
  assert jax.tree.structure(params) == jax.tree.structure(
      axes, is_leaf=lambda x: isinstance(x, P))
  neox = tfm.Transformer(tfm.neox_config(vocab_size=64, d_model=32, num_layers=1,
                                         num_heads=4, d_ff=64))
  neox_axes = tfm.logical_axes(neox)["layer_0"]
  assert neox_axes["attn_norm"]["bias"] == P("norm")
  assert neox_axes["attn"]["q_proj"]["bias"] == P("heads")


def test_rules_map_names_onto_the_mesh_axes_it_has():
  rules = dict(partitioning.LOGICAL_AXIS_RULES)
  assert rules["embed"] == "fsdp" and rules["mlp"] == rules["heads"] == "tensor"
  assert rules["batch"] == ("data", "fsdp") and rules["norm"] is None
  mesh = sharding.make_mesh()  # data only: every parameter replicated.
  abstract = {"w": jax.ShapeDtypeStruct((8, 4), jnp.float32)}
  shardings = partitioning.param_shardings(abstract, {"w": P("embed", "mlp")}, mesh)
  assert shardings["w"].spec == P(None, None)
  assert dict(partitioning.rules_for_mesh(mesh))["batch"] in ("data", None)
  with pytest.raises(ValueError, match=r"logical axes \('embed',\) do not match"):
    partitioning.param_shardings(abstract, {"w": P("embed")}, mesh)
  with pytest.raises(ValueError, match="axis rule"):
    partitioning.check_rules((("embed", 3),))


def test_train_config_mesh_is_validated_in_one_line():
  config = train_lib.default_train_config()
  assert dict(config.mesh) == {"data": -1, "fsdp": 1, "tensor": 1}
  assert train_lib.mesh_sizes(config) == {"data": -1, "fsdp": 1, "tensor": 1}
  config.mesh_shape = (1,)  # The older key still sets the data axis.
  assert train_lib.mesh_sizes(config)["data"] == 1
  config.mesh.data = 2
  with pytest.raises(ValueError, match=r"config.mesh_shape=\(1,\) and config.mesh.data=2 "
                     "disagree") as info:
    train_lib.validate_train_config(config)
  assert "\n" not in str(info.value)
  config.mesh.data, config.mesh_shape, config.mesh.fsdp = -1, (2,), -1
  assert train_lib.mesh_sizes(config) == {"data": 2, "fsdp": -1, "tensor": 1}
  config.mesh.tensor = -1
  with pytest.raises(ValueError, match=r"holds more than one -1"):
    train_lib.validate_train_config(config)
  config.mesh_shape = (-1,)
  config.mesh.fsdp = 0
  with pytest.raises(ValueError, match=r"config.mesh.fsdp=0 is invalid"):
    train_lib.validate_train_config(config)
  old = {key: value for key, value in train_lib.default_train_config().items()
         if key != "mesh"}  # A config written before the key: data parallel.
  assert train_lib.mesh_sizes(old) == {"data": -1, "fsdp": 1, "tensor": 1}
  with pytest.raises(ValueError, match=r"mesh axes \['model'\] are unknown"):
    sharding.mesh_from_sizes({"model": 2})
  assert sharding.mesh_from_sizes({"fsdp": 1}).axis_names == ("data",)


def test_axes_of_a_parameter_subset_are_read_at_its_paths():
  axes = tfm.logical_axes(tfm.Transformer(CONFIG))
  subset = {"layer_0": {"mlp": {"up_proj": {"kernel": jnp.zeros((32, 64))}}},
            "extra": jnp.zeros(3)}
  got = partitioning.axes_at_paths(axes, subset)
  assert got == {"layer_0": {"mlp": {"up_proj": {"kernel": P("embed", "mlp")}}},
                 "extra": P()}


def test_opt_state_follows_the_param_shardings():
  mesh = sharding.make_mesh()
  params = {"w": jax.ShapeDtypeStruct((8, 4), jnp.float32)}
  shardings = partitioning.param_shardings(params, {"w": P("embed", "mlp")}, mesh)
  tx = train_lib.warmup_cosine_adamw(1e-3, 10)
  opt = partitioning.opt_state_shardings(tx, jax.eval_shape(tx.init, params), shardings, mesh)
  adam = opt[1][0]
  assert adam.mu["w"] is shardings["w"] and adam.count.spec == P()


# ------------------------------------------------------------ the 8-device subprocess
def _model_and_params():
  """The model and the parameters `common.train` initialises with seed 0."""
  model = tfm.Transformer(CONFIG)
  return model, tfm.init_params(model, jax.random.split(jax.random.PRNGKey(0))[0])


def _tokens(seed: int, shape) -> np.ndarray:
  return np.asarray(jax.random.randint(jax.random.PRNGKey(seed), shape, 0, CONFIG.vocab_size))


def _forward_and_decoding(model, params, sharded, mesh) -> dict:
  """(a) logits of a sharded forward pass; (b) greedy cached decoding."""
  from common.models import sampling  # pylint: disable=g-import-not-at-top
  tokens = _tokens(1, (BATCH, SEQ))
  apply = jax.jit(model.apply)
  want = apply({"params": params}, tokens)
  got = apply({"params": sharded}, sharding.shard_batch(tokens, mesh))
  kwargs = dict(max_new_tokens=NEW, temperature=0.0, return_info=True, return_logits=True)
  ref = sampling.generate(model, params, tokens, jax.random.PRNGKey(2), **kwargs)
  with partitioning.axis_rules(mesh):
    cache = partitioning.shard_cache(tfm.init_cache(CONFIG, BATCH, SEQ + NEW), mesh)
    gen = sampling.generate(model, sharded, sharding.shard_batch(tokens, mesh),
                            jax.random.PRNGKey(2), cache=cache, **kwargs)
  return {"forward_max_diff": float(jnp.max(jnp.abs(got - want))),
          "decode_tokens_equal": bool(jnp.all(gen.tokens == ref.tokens)),
          "decode_logits_max_diff": float(jnp.max(jnp.abs(gen.logits - ref.logits))),
          "cache_spec": [str(a) for a in cache.k.sharding.spec]}


def _agzo_runs(model, params, workdir: str) -> dict:
  """(c) two AGZO steps: the optimizer's own jitted step on replicated parameters, and
  `common.train` on the sharded mesh (resumed from its checkpoint after one step)."""
  from common.models import taps as taps_lib  # pylint: disable=g-import-not-at-top
  import methods.zeroth_order as zo  # pylint: disable=g-import-not-at-top

  def loss_and_taps(params, batch):
    logits, taps = taps_lib.apply_with_taps(model, {"params": params}, batch["x"])
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, batch["y"][..., None], -1)), taps

  tx = optax.chain(zo.agzo(loss_and_taps, 1e-2, key=jax.random.PRNGKey(3), rank=2),
                   optax.sgd(1e-2))
  data = _tokens(4, (BATCH, SEQ + 1))
  batch = {"x": data[:, :-1], "y": data[:, 1:]}
  step = zo.make_step(tx)
  want, opt_state = step(params, tx.init(params), batch)
  want, _ = step(want, opt_state, batch)
  loss_fn = lambda params, batch, key: (loss_and_taps(params, batch)[0], {})
  run = lambda steps, init, **kw: train_lib.train(
      init_fn=init, loss_fn=loss_fn, batch_fn=lambda seed, step: batch, optimizer=tx,
      gradient_free=True, workdir=workdir, **kw,
      config=train_lib.default_train_config(num_steps=steps, batch_size=BATCH, seed=0,
                                            checkpoint_every=1, progress_bar=False,
                                            mesh=MESH))
  run(1, lambda key: model.init(key, batch["x"][:1])["params"])  # names from the boxes
  got = run(2, lambda key: tfm.init_params(model, key), param_axes=tfm.logical_axes(model))
  kernel = got.state.params["layer_0"]["mlp"]["up_proj"]["kernel"]
  diff = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), got.state.params, want)
  return {"agzo_max_diff": max(jax.tree.leaves(diff)),
          "agzo_moved": float(optax.tree.norm(optax.tree.sub(want, params))),
          "agzo_step": int(got.state.step),
          "agzo_kernel_spec": [str(a) for a in kernel.sharding.spec],
          "agzo_param_bytes": [partitioning.per_device_bytes(want),
                               partitioning.per_device_bytes(got.state.params)]}


def _bytes(params) -> dict:
  """(d) per-device parameter bytes on fsdp=4, and what the specs predict."""
  mesh = sharding.mesh_from_sizes({"data": 2, "fsdp": 4})
  axes = tfm.logical_axes(tfm.Transformer(CONFIG))
  shardings = partitioning.param_shardings(params, axes, mesh)
  placed = jax.device_put(params, shardings)
  split = lambda s: int(np.prod([mesh.shape[a] for part in s.spec if part
                                 for a in ((part,) if isinstance(part, str) else part)]))
  return {"bytes_replicated": partitioning.per_device_bytes(jax.device_put(
              params, sharding.replicated_sharding(mesh))),
          "bytes_fsdp4": partitioning.per_device_bytes(placed),
          "bytes_fsdp4_expected": int(sum(x.nbytes // split(s) for x, s in zip(
              jax.tree.leaves(params), jax.tree.leaves(shardings)))),
          "bytes_norms": int(sum(x.nbytes for path, x in jax.tree_util.tree_leaves_with_path(
              params) if "norm" in jax.tree_util.keystr(path)))}


def _main(out_path: str, workdir: str) -> None:
  model, params = _model_and_params()
  mesh = sharding.mesh_from_sizes(MESH)
  axes = tfm.logical_axes(model)
  sharded = jax.device_put(params, partitioning.param_shardings(params, axes, mesh))
  results = {"device_count": jax.device_count(), "mesh": dict(mesh.shape),
             **_forward_and_decoding(model, params, sharded, mesh), **_bytes(params),
             **_agzo_runs(model, params, workdir)}
  with open(out_path, "w") as f:
    json.dump(results, f)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("lm_sharding")
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  # After the caller's XLA_FLAGS, so that an ISA cap reaches the child too.
  xla_flags = (f"{os.environ.get('XLA_FLAGS', '')} "
               f"--xla_force_host_platform_device_count=8").strip()
  env = dict(os.environ, XLA_FLAGS=xla_flags,
             JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]))
  out = tmp / "out.json"
  proc = subprocess.run([sys.executable, os.path.abspath(__file__), str(out), str(tmp / "run")],
                        env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(out) as f:
    return json.load(f)


def test_sharded_forward_pass_equals_the_replicated_one(measured):
  assert measured["device_count"] == 8 and measured["mesh"] == MESH
  assert measured["forward_max_diff"] < 1e-5


def test_sharded_cached_decoding_equals_the_replicated_one(measured):
  assert measured["decode_tokens_equal"]
  assert measured["decode_logits_max_diff"] < 1e-5
  # Keys and values split over batch (data x fsdp) and kv heads (tensor).
  assert measured["cache_spec"] == ["None", "('data', 'fsdp')", "None", "tensor", "None"]


def test_sharded_agzo_steps_equal_the_replicated_ones(measured):
  assert measured["agzo_step"] == 2
  assert measured["agzo_moved"] > 1e-4  # The steps changed the parameters ...
  assert measured["agzo_max_diff"] < 1e-5  # ... identically on both meshes.
  assert measured["agzo_kernel_spec"] == ["fsdp", "tensor"]
  replicated, sharded = measured["agzo_param_bytes"]
  assert sharded < 0.3 * replicated


def test_per_device_parameter_bytes_drop_by_the_fsdp_factor(measured):
  full, fsdp4 = measured["bytes_replicated"], measured["bytes_fsdp4"]
  assert fsdp4 == measured["bytes_fsdp4_expected"]
  # Every kernel and the embedding is split 4 ways; only the norm scales stay whole.
  assert fsdp4 == pytest.approx((full - measured["bytes_norms"]) / 4 + measured["bytes_norms"])
  assert fsdp4 < 0.26 * full


if __name__ == "__main__":
  _main(sys.argv[1], sys.argv[2])
