"""Experiment: RaBitQ KV-cache attention (RaBitQCache) on real and synthetic caches.

1. Estimator: bias and error of the RaBitQ estimate of <o, q> for unit vectors over
   random rotations and roundings (randomised vs deterministic 4-bit query rounding),
   the fraction of errors inside the eps0 = 1.9 bound, and the error against d.
2. Selection: on synthetic caches (non-zero key mean, outlier channels; half of the
   queries peaked, half flat; 4k-32k tokens) and on the trained LM's caches, the
   recall of the true attention mass and the relative output error against the number
   of tokens touched, for RaBitQ top-p (several p; with and without centring), oracle
   top-k / top-p and Quest. Every method also attends the sinks and the recent window.
3. End to end: the LM's next-byte loss and top-1 agreement under teacher-forced
   sparse decoding (the real `attention_fn` in the cached decoding loop) at several p.
4. Memory: bytes per token of the key cache, 1-bit codes + scalars vs bf16/fp32.

Each study is a stage (`common.trials.cached_stage`) keyed by the sub-configs it
reads, and by the LM's fingerprint where it uses the LM, so a rerun resumes after the
last finished stage and a changed sub-config recomputes only the stages that read it.
Plots: `experiments/plots/rabitq_attention.py`.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from common import lm as lm_lib
from common import report
from common import trials
from common.data import text
from common.models import logprobs
from common.models import transformer
from experiments.configs import rabitq_attention as config_module
from experiments.plots import rabitq_attention as plots
from methods import rabitq_attention as ra
from methods.rabitq_attention import baselines

VARIANTS = {"rabitq": (True, True), "rabitq_keys_only": (True, False),
            "rabitq_no_centering": (False, False)}     # (centre keys, centre queries)
CURVE_KEYS = ("tokens", "recall", "out_err")


def estimator_study(cfg, key) -> dict:
  """Per d: RMSE / bias / bound coverage of the estimate of <o, q> for unit vectors,
  with <o, q> ~ U[-0.8, 0.8] (the same spread for every d). `cfg`: config.estimator."""
  out = {}
  for d in cfg.dims:
    ko, kq, ka, kr = jax.random.split(jax.random.fold_in(key, d), 4)
    o = jax.random.normal(ko, (cfg.pairs, d))
    o = o / jnp.linalg.norm(o, axis=-1, keepdims=True)
    q = ra.query_at_cosine(o, jax.random.normal(kq, (cfg.pairs, d)),
                           jax.random.uniform(ka, (cfg.pairs, 1), minval=-0.8, maxval=0.8))
    draws = ra.estimator_trials(o, q, kr, cfg.rotations, cfg.eps0)
    exact = jnp.sum(o * q, axis=-1)
    out[d] = {name: ra.error_stats(getattr(draws, name), exact, draws.bound)
              for name in ("float", "randomized", "deterministic")}
    out[d]["median_bound"] = float(np.median(np.asarray(draws.bound)))
  return out


_metrics = jax.jit(ra.selection_metrics)
_top_p_mask = jax.jit(ra.top_p_mask)
_top_k_mask = jax.jit(ra.top_k_mask, static_argnums=2)
_quest_bounds = jax.jit(lambda q, k, valid, chunk: baselines.quest_bounds(q, k[None], valid, chunk),
                        static_argnums=3)
_quest_mask = jax.jit(baselines.quest_mask, static_argnums=(2, 3))


def selection_curves(q, k, v, valid, forced, key, sel, query_center=None) -> dict:
  """{method: {"pts": [{"tokens", "recall", "out_err"} per budget], "logit_rmse"}}.

  q (Q, D); k, v (S, D); valid, forced (Q, S) bool; `sel`: config.selection. Each
  point holds per-query arrays for one budget parameter (p, k or Quest chunks).
  """
  logits = q @ k.T / math.sqrt(q.shape[-1])
  full = baselines.masked_attention(q[:, None, :], k[None], v[None], valid[:, None, :])[:, 0]

  def point(mask):
    tokens, recall, out_err = _metrics(q, k, v, logits, valid, full, mask)
    return dict(tokens=np.asarray(tokens, float), recall=np.asarray(recall),
                out_err=np.asarray(out_err))

  curves = {}
  for name, (ck, cq) in VARIANTS.items():
    est = ra.dense_estimated_logits(q, k, key, center_keys=ck, center_queries=cq,
                                    query_center=query_center).logits
    est = jnp.where(forced, logits, est)     # sinks and recent window: exact, as in decoding
    err = jnp.where(valid & ~forced, est - logits, 0.0)
    curves[name] = dict(pts=[point(_top_p_mask(est, valid, p, forced)) for p in sel.p_values],
                        logit_rmse=float(jnp.sqrt(jnp.sum(err ** 2) / jnp.sum(valid & ~forced))))
  curves["oracle_top_p"] = dict(pts=[point(_top_p_mask(logits, valid, p, forced))
                                     for p in sel.p_values])
  s, chunk = k.shape[0], sel.quest_chunk
  curves["oracle_top_k"] = dict(pts=[point(_top_k_mask(logits, valid, b, forced))
                                     for b in sel.topk_budgets if b <= s])
  bounds = _quest_bounds(q, k, valid, chunk)
  curves["quest"] = dict(pts=[point(_quest_mask(bounds, valid, n, chunk, forced))
                              for n in sel.quest_chunks if n * chunk <= s])
  return curves


def summarize_curves(curves: dict, groups: dict | None = None) -> dict:
  """Mean tokens / recall / output error per point (optionally per query group)."""
  groups = groups or {"all": slice(None)}
  out = {}
  for name, c in curves.items():
    out[name] = {g: {key: [float(np.mean(pt[key][sl])) for pt in c["pts"]] for key in CURVE_KEYS}
                 for g, sl in groups.items()}
    if "logit_rmse" in c:
      out[name]["logit_rmse"] = c["logit_rmse"]
  return out


def synthetic_selection(config, key) -> dict:
  """Summarised selection curves per synthetic context length (peaked / flat groups)."""
  sel, syn, out = config.selection, config.synthetic, {}
  for s in syn.contexts:
    ks = jax.random.fold_in(key, s)
    q, k, v = ra.synthetic_cache(ks, s, syn.dim, syn.queries, syn.outlier_channels)
    valid, forced = ra.decode_masks(jnp.full((q.shape[0],), s - 1), s, sel.num_sink,
                                    sel.recent_window)
    curves = selection_curves(q, k, v, valid, forced, jax.random.fold_in(ks, 1), sel)
    half = q.shape[0] // 2
    out[s] = summarize_curves(curves, {"all": slice(None), "peaked": slice(0, half),
                                       "flat": slice(half, None)})
  return out


def real_selection(config, trained, key) -> dict:
  """Selection curves on the LM's caches, pooled over all layers and query heads: the
  last `real.queries` positions of one validation window of `real.context` bytes."""
  sel, s, nq = config.selection, config.real.context, config.real.queries
  tokens = np.asarray(trained.corpus.validation)[None, :s].astype(np.int32)
  layers = ra.record_queries(trained.model, trained.params, tokens,
                             min(config.real.prefill_chunk, s))
  c = trained.model.config
  g = c.num_heads // c.kv_heads
  valid, forced = ra.decode_masks(jnp.arange(s - nq, s), s, sel.num_sink, sel.recent_window)
  pooled, entropies = [], []
  for li, (qs, ks, vs) in enumerate(layers):
    qs, ks, vs = qs[0], ks[0], vs[0]
    for h in range(c.num_heads):
      q, k, v, kvh = qs[s - nq:, h], ks[:, h // g], vs[:, h // g], h // g
      q_center = jnp.mean(qs[:, kvh * g:(kvh + 1) * g], axis=(0, 1))
      pooled.append(selection_curves(q, k, v, valid, forced,
                                     jax.random.fold_in(key, li * 100 + h), sel, q_center))
      entropies.append(np.asarray(ra.attention_entropy(q @ k.T / math.sqrt(q.shape[-1]),
                                                       valid)))
  merged = _merge_curves(pooled)
  summary = summarize_curves(merged)
  # Budget adaptivity: per-query tokens at p = 0.9 vs the exact attention entropy.
  ip = _p_index(sel.p_values)
  per_query_tokens = merged["rabitq"]["pts"][ip]["tokens"]
  summary["head_dim"] = int(c.dim_per_head)
  summary["adapt"] = dict(
      spearman_tokens_entropy=_spearman(per_query_tokens, np.concatenate(entropies)),
      tokens_p10=float(np.percentile(per_query_tokens, 10)),
      tokens_p90=float(np.percentile(per_query_tokens, 90)),
      p=float(sel.p_values[ip]))
  return summary


def _merge_curves(pooled: list) -> dict:
  """One curve per method from per-head curves: per-query arrays concatenated, logit
  RMSE pooled over heads."""
  merged = {}
  for name, first in pooled[0].items():
    merged[name] = dict(pts=[{key: np.concatenate([p[name]["pts"][i][key] for p in pooled])
                              for key in CURVE_KEYS} for i in range(len(first["pts"]))])
    if "logit_rmse" in first:
      merged[name]["logit_rmse"] = float(np.sqrt(np.mean([p[name]["logit_rmse"] ** 2
                                                          for p in pooled])))
  return merged


def _p_index(p_values, p: float = 0.9) -> int:
  return int(np.argmin(np.abs(np.asarray(p_values) - p)))


def _spearman(a, b) -> float:
  ra_, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
  return float(np.corrcoef(ra_, rb)[0, 1])


def end_to_end(config, trained, key) -> dict:
  """Teacher-forced decoding of validation windows: prefill `e2e.prefill` bytes, then
  one byte at a time through the cache, with full attention and with RaBitQ at each p."""
  e2e, model, params = config.e2e, trained.model, trained.params
  c = model.config
  windows = next(text.eval_windows(np.asarray(trained.corpus.validation), e2e.length - 1,
                                   e2e.windows, e2e.windows))
  tokens = jnp.asarray(windows, jnp.int32)                  # (windows, length)
  b, length = tokens.shape
  p0 = e2e.prefill
  rcfg = ra.RaBitQConfig(num_sink=e2e.num_sink, recent_window=e2e.recent_window,
                         interval=e2e.interval, max_budget=e2e.max_budget, top_p=0.9)
  decode = lambda m: jax.jit(lambda cc: ra.teacher_forced_decode(m, params, tokens, p0, cc))
  full_logits, _ = decode(model)(transformer.init_cache(c, b, length))
  sparse_run = decode(transformer.Transformer(c, attention_fn=ra.make_attention_fn(rcfg)))
  base_cache = ra.init_cache(rcfg, c, b, length, key)
  loss = lambda lg: float(-jnp.mean(logprobs.token_logprobs(lg, tokens[:, p0:])))
  full_top = jnp.argmax(full_logits, -1)
  res = {"full": dict(loss=loss(full_logits), agreement=1.0,
                      tokens=float(np.mean(np.arange(p0, length - 1) + 1)))}  # positions attended
  for p in e2e.p_values:
    lg, count = sparse_run(ra.with_top_p(base_cache, p))
    res[f"p={p:g}"] = dict(loss=loss(lg), agreement=float(jnp.mean(jnp.argmax(lg, -1) == full_top)),
                           tokens=float(count))
  return res


def memory_figures(dim: int, key) -> dict:
  """Bytes per token and KV head of the key cache, measured from a layer state's arrays
  (their shapes only: `key` is never drawn from), at head width 32 and `dim`."""
  out = {}
  for d in sorted({32, dim}):
    mc = transformer.llama_config(d_model=d * 2, num_heads=2, num_kv_heads=1, head_dim=d)
    rcfg = ra.RaBitQConfig(num_sink=0, recent_window=1, interval=1, max_budget=8)
    st = jax.eval_shape(lambda: ra.init_layer_state(rcfg, mc, 1, 64, key))
    per_pos = sum(x.size * x.dtype.itemsize
                  for x in (st.words, st.norm, st.ip_correction, st.center_term)) / 64
    out[str(d)] = dict(rabitq=per_pos, bf16=2.0 * d, fp32=4.0 * d,
                       formula=float(ra.key_bytes_per_token(d)))
  return out


def estimator_measures(est: dict, figures: dict) -> dict:
  """Adds the estimator's figures; returns the slope, coverage and bias it claims on."""
  dims = sorted(est, key=int)
  for d in dims:
    for name in ("float", "randomized", "deterministic"):
      for key in ("rmse", "bias_t_rms", "inside_bound"):
        figures[f"estimator/d={d}/{name}/{key}"] = est[d][name][key]
  slope = float(np.polyfit(np.log([int(d) for d in dims]),
                           np.log([est[d]["float"]["rmse"] for d in dims]), 1)[0])
  figures["estimator/rmse_vs_d_slope"] = slope
  return dict(slope=slope, inside=min(est[d]["float"]["inside_bound"] for d in dims),
              bias_rand=max(est[d]["randomized"]["bias_t_rms"] for d in dims),
              bias_det=max(est[d]["deterministic"]["bias_t_rms"] for d in dims))


def selection_measures(panels: dict, syn: dict, real: dict, config, figures: dict) -> dict:
  """Adds the selection figures; returns per cache the Quest/RaBitQ token ratio at the
  recall target and the centring gain, and the budget adaptivity."""
  target, p_values = config.claims.recall_target, config.selection.p_values
  m = dict(tokens={}, ratio={}, centring={}, adapt={})
  for title, summ in panels.items():
    t = {name: ra.tokens_at_recall(summ[name]["all"]["tokens"], summ[name]["all"]["recall"],
                                   target)
         for name in ("rabitq", "quest", "oracle_top_k", "rabitq_no_centering")}
    for name, x in t.items():
      figures[f"{title}/tokens_at_recall_{target:g}/{name}"] = x
    m["tokens"][title], m["ratio"][title] = t, t["quest"] / t["rabitq"]
    for name in VARIANTS:
      figures[f"{title}/{name}/logit_rmse"] = summ[name]["logit_rmse"]
    m["centring"][title] = summ["rabitq_no_centering"]["logit_rmse"] / summ["rabitq"]["logit_rmse"]
    for i, p in enumerate(p_values):
      for key in CURVE_KEYS:
        figures[f"{title}/rabitq/p={p:g}/{key}"] = summ["rabitq"]["all"][key][i]
  ip = _p_index(p_values)
  for s, summ in syn.items():
    flat, peaked = summ["rabitq"]["flat"]["tokens"][ip], summ["rabitq"]["peaked"]["tokens"][ip]
    m["adapt"][s] = flat / peaked
    figures[f"synthetic, {s} tokens/rabitq/p={p_values[ip]:g}/tokens_flat"] = flat
    figures[f"synthetic, {s} tokens/rabitq/p={p_values[ip]:g}/tokens_peaked"] = peaked
  figures["LM caches/head_dim"] = float(real["head_dim"])
  for key, v in real["adapt"].items():
    figures[f"LM caches/adapt/{key}"] = v
  return m


def e2e_memory_measures(e2e: dict, mem: dict, config, figures: dict) -> dict:
  """Adds the end-to-end and memory figures; returns the judged p's results, its loss
  change and the compression at config.memory.dim."""
  for k, v in e2e.items():
    for key, x in v.items():
      figures[f"e2e/{k}/{key}"] = x
  sel = e2e.get(f"p={config.claims.e2e_p:g}")
  for d, m in mem.items():
    for key, x in m.items():
      figures[f"memory/d={d}/{key}_bytes_per_token"] = x
  mem_dim = mem[str(config.memory.dim)]
  figures["memory/compression_vs_bf16"] = mem_dim["bf16"] / mem_dim["rabitq"]
  return dict(sel=sel, loss_rel=sel["loss"] / e2e["full"]["loss"] - 1.0 if sel else float("nan"),
              full_loss=e2e["full"]["loss"], mem=mem_dim,
              mem_ratio=figures["memory/compression_vs_bf16"])


def claims(est: dict, sel: dict, dec: dict, real: dict, config) -> list:
  """The claim table from the measures above (`real`: the LM stage): the estimator's,
  the selection's, and decoding and memory rows."""
  return report.claims_table(estimator_claims(est, config) +
                             selection_claims(sel, real, config) +
                             decoding_claims(dec, config))


def estimator_claims(est: dict, config) -> list:
  eps0 = config.estimator.eps0
  return [
      report.Claim(
          "The RaBitQ score estimator is unbiased with randomised query rounding "
          "(RMS over pairs of the bias t-statistic over rotations and roundings <= 1.5)",
          "unbiased estimator (Thm.)",
          f"RMS t: randomised {est['bias_rand']:.2f}, deterministic {est['bias_det']:.2f} "
          "(max over d)", est["bias_rand"], "<=", 1.5),
      report.Claim(
          f"The error bound with eps0={eps0:g} holds at the stated rate "
          f"(>= {ra.bound_rate(eps0):.3f} of pairs) and the error scales like 1/sqrt(d) "
          "(log-log slope in [-0.6, -0.4])", "error O(1/sqrt(d)) w.h.p.",
          f"min coverage over d {est['inside']:.3f}; slope {est['slope']:.2f}",
          est["inside"], ">=", ra.bound_rate(eps0) - 0.01,
          also=[(est["slope"], "in", (-0.6, -0.4))]),
  ]


def selection_claims(sel: dict, real: dict, config) -> list:
  cc, target, p_values = config.claims, config.claims.recall_target, config.selection.p_values
  fmt = lambda dct: "; ".join(f"{k}: {v:.3g}" for k, v in dct.items())
  real_title = f"LM caches, {config.real.context} tokens"
  real_ratio, t_real = sel["ratio"][real_title], sel["tokens"][real_title]
  syn_ratios = {k: v for k, v in sel["ratio"].items() if k != real_title}
  ad = real["adapt"]
  return [
      report.Claim(
          f"On synthetic caches (d={config.synthetic.dim}, non-zero key mean, outlier "
          f"channels), at the same attention-mass recall ({target:g}) RaBitQ top-p "
          f"touches far fewer tokens than Quest (ratio Quest/RaBitQ >= "
          f"{cc.quest_ratio_min:g} at every context length)",
          "qualitative: fewer tokens / less memory I/O than Quest", fmt(syn_ratios),
          syn_ratios, ">=", cc.quest_ratio_min),
      report.Claim(
          f"The same on the trained LM's caches (d={real['head_dim']}, "
          f"{config.real.context} tokens)",
          "qualitative: fewer tokens than Quest on real LLM caches",
          f"Quest/RaBitQ tokens at recall {target:g}: {real_ratio:.3g}" + (
              f" (RaBitQ top-p never reaches it up to p={max(p_values):g})"
              if not np.isfinite(real_ratio) else
              f" ({t_real['rabitq']:.0f} vs {t_real['quest']:.0f} tokens)"),
          real_ratio, ">=", cc.quest_ratio_min),
      report.Claim(
          "The top-p budget adapts to the attention's sparsity: more tokens for flat "
          f"attention than for peaked (ratio >= {cc.adapt_ratio_min:g} at "
          f"p={p_values[_p_index(p_values)]:g}), while top-k is fixed; on the LM caches the "
          "per-query budget rises with the attention entropy (Spearman > 0.5)",
          "qualitative: budget follows actual attention sparsity",
          f"flat/peaked tokens: {fmt(sel['adapt'])}; LM Spearman "
          f"{ad['spearman_tokens_entropy']:.2f}, tokens p10-p90 "
          f"{ad['tokens_p10']:.0f}-{ad['tokens_p90']:.0f}",
          sel["adapt"], ">=", cc.adapt_ratio_min,
          also=[(ad["spearman_tokens_entropy"], ">", 0.5)]),
      report.Claim(
          "Centring (key mean c_k, query mean c_q) reduces the score-estimation error "
          "(logit RMSE without / with centring > 1 on every cache)",
          "qualitative: centring helps with the non-zero key mean", fmt(sel["centring"]),
          sel["centring"], ">", 1.0),
  ]


def decoding_claims(dec: dict, config) -> list:
  cc, run, mem = config.claims, dec["sel"], dec["mem"]
  return [
      report.Claim(
          f"End to end, sparse decoding at p={cc.e2e_p:g} preserves the LM's "
          f"predictions (top-1 agreement >= {cc.e2e_agreement_min:g}, loss within "
          f"{100 * cc.e2e_loss_rel_max:g}% of full attention)",
          "qualitative: preserves generation quality",
          (f"agreement {run['agreement']:.3f}, loss {run['loss']:.4f} vs "
           f"{dec['full_loss']:.4f} ({100 * dec['loss_rel']:+.2f}%), "
           f"{run['tokens']:.1f} tokens/step" if run else "not run"),
          run["agreement"] if run else None, ">=", cc.e2e_agreement_min,
          also=[(dec["loss_rel"], "<=", cc.e2e_loss_rel_max)]),
      report.Claim(
          f"1-bit keys + 3 fp32 scalars shrink the key cache >= "
          f"{cc.memory_ratio_min:g}x vs bf16 at d={config.memory.dim}",
          "1 bit per key dimension",
          f"{mem['rabitq']:.0f} vs {mem['bf16']:.0f} bytes/token/head ({dec['mem_ratio']:.1f}x)",
          dec["mem_ratio"], ">=", cc.memory_ratio_min),
  ]


def _fingerprint(config, parts: tuple, uses_lm: bool) -> str:
  """The fingerprint of a stage: the seed, the sub-configs it reads, and the LM's."""
  keys = {"seed": config.seed, **{part: config[part] for part in parts}}
  if uses_lm:
    keys["lm"] = lm_lib.fingerprint(config.lm)
  return trials.config_fingerprint(keys)


@report.register("rabitq_attention", validate=config_module.validate,
                 title="RaBitQCache: rotated binary KV quantisation for adaptive top-p attention")
def run(config, workdir: str) -> report.Result:
  """Runs the four studies (each a cached stage), writes the plots, returns the claims."""
  key = jax.random.PRNGKey(config.seed)
  lm = functools.cache(lambda: lm_lib.trained_lm(config.lm, workdir,
                                                 lm_workdir=config.lm_workdir))

  def stage(name, parts, compute, uses_lm=False):
    return trials.cached_stage(workdir, name, _fingerprint(config, parts, uses_lm), compute)

  est = stage("estimator", ("estimator",),
              lambda: estimator_study(config.estimator, jax.random.fold_in(key, 1)))
  syn = stage("synthetic", ("selection", "synthetic"),
              lambda: synthetic_selection(config, jax.random.fold_in(key, 2)))
  real = stage("real", ("selection", "real"),
               lambda: real_selection(config, lm(), jax.random.fold_in(key, 3)), uses_lm=True)
  e2e = stage("e2e", ("e2e",), lambda: end_to_end(config, lm(), jax.random.fold_in(key, 4)),
              uses_lm=True)
  panels = {f"synthetic, {s} tokens": v for s, v in syn.items()}
  panels[f"LM caches, {config.real.context} tokens"] = real
  figures = {}
  measured = (estimator_measures(est, figures),
              selection_measures(panels, syn, real, config, figures),
              e2e_memory_measures(e2e, memory_figures(config.memory.dim, key), config,
                                  figures))
  return report.Result(claims=claims(*measured, real, config), figures=figures,
                       plots=plots.write_all(workdir, est, panels, e2e))
