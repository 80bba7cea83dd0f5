"""Experiment: Q-Tab against its ablations, the SDV Gaussian copula and a TabDDPM-style
diffusion model, on real bundled tables (or TabSyn-layout folders).

For every table and seed: the table is split once (`config.seed`) into training and
held-out rows and encoded (quantile-normal numeric columns, category indices); every
Q-Tab variant trains its numeric tokenizer and then its masked generator through
`common.train` (runs resume from `runs/<table>-s<seed>-<variant>-<stage>-<fp>`), and
the diffusion baseline trains the same way; each method generates as many rows as the
training set has, and is scored with sdmetrics (column shapes, pair trends, logistic
detection, DCR share), MLE on the held-out rows, alpha-precision / beta-recall and,
for Q-Tab, imputation of each categorical column and the code statistics. One
`TrialLog` row per (table, seed, method) in `evals.jsonl`: an interrupted run resumes
at the next method.

Checked claims (the Q-Tab abstract): (1) predictive utility (MLE) at least that of
every baseline on most tables; (2) fidelity close to the diffusion model's; (3) the
generated rows use more distinct codes than there are training rows, corruption
raises that number, and rows decoded from unseen codes are plausible (non-zero
distance to the closest training record, detection close to that of seen codes);
(4) the residual structure beats plain LFQ and no corruption on MLE or fidelity.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import threadpoolctl

from common import report
from common import train as train_lib
from common import trials
from common.data import tables
from experiments.configs import qtab as config_module
from experiments.plots import qtab as plots
from methods.qtab import copula as copula_lib
from methods.qtab import diffusion as diffusion_lib
from methods.qtab import generator as gen_lib
from methods.qtab import metrics
from methods.qtab import model as model_lib
from methods.qtab import tokenizer as tok_lib
from methods.qtab import training

_NOT_RESULTS = ("preset", "tables", "variants", "baselines", "num_seeds", "data_dir")
_MIN_SUBSET = 50  # rows needed to score seen-code and unseen-code rows apart
_DCR_ROWS = 1000  # sdmetrics' DCR is a cross join: quadratic in rows


def load(config, name: str) -> tuple[tables.Table, tables.Table]:
  """(training, held-out) rows of one table: a TabSyn folder, or a bundled table split
  with `config.seed`."""
  if config.data_dir:
    train, test = tables.load_tabsyn(os.path.join(config.data_dir, name), name=name)
  else:
    table = tables.load_table(name, max_rows=config.max_rows or None, seed=config.seed)
    train, test = tables.split(table, config.test_fraction, config.seed)
  tables.check_rows(train, max(config.tokenizer.train.batch_size,
                               config.generator.train.batch_size))
  return train, test


def tokenizer_config(config, variant: str) -> tok_lib.TokenizerConfig:
  """The `config.tokenizer` fields the TokenizerConfig has, changed as `variant` asks."""
  fields = [k for k in tok_lib.TokenizerConfig._fields if k in config.tokenizer]
  base = tok_lib.TokenizerConfig(**{k: config.tokenizer[k] for k in fields})
  return {"qtab": base,
          "qtab_uniform": base._replace(corruption=config.ablations.other_corruption),
          "no_corruption": base._replace(corruption="none"),
          "plain_lfq": base._replace(levels=1, bits=config.ablations.plain_bits),
          "rvq": base._replace(quantizer="rvq", corruption="none")}[variant]


def _fit(workdir: str, name: str, init_fn, loss_fn, batch_fn, sub, salt: str, seed: int,
         opt=None):
  """One model on the common loop, resumed from `runs/<name>-<fp>` (default optimizer:
  `training.optimizer` at `sub.learning_rate`)."""
  loop = sub.train.copy_and_resolve_references()
  with loop.unlocked():
    loop.seed = seed
  fp = trials.config_fingerprint(sub, salt=salt)[:10]
  opt = opt or training.optimizer(sub.learning_rate, loop.num_steps)
  return train_lib.train(init_fn=init_fn, loss_fn=loss_fn, batch_fn=batch_fn, optimizer=opt,
                         config=loop, workdir=os.path.join(workdir, "runs", f"{name}-{fp}")
                         ).state.params


def fit_qtab(config, workdir: str, encoded: tables.Encoded, cardinalities, variant: str,
             seed: int, tag: str):
  """(spec, params) of one Q-Tab variant: the tokenizer, then the generator on its tokens."""
  tc = tokenizer_config(config, variant)
  g = config.generator
  spec = model_lib.make_spec(tc, gen_lib.GeneratorConfig(g.width, g.depth, g.heads),
                             encoded.numeric.shape[1], cardinalities)
  tok_params = {}
  if spec.num_numeric:
    salt = f"{tag}-{tc}"
    tok_params = _fit(workdir, f"{tag}-{variant}-tokenizer",
                      lambda k: tok_lib.init(k, tc, spec.num_numeric), tok_lib.make_loss_fn(tc),
                      training.rows_batch_fn(encoded.numeric, config.tokenizer.train.batch_size,
                                             "x"), config.tokenizer, salt, seed)
  tokens = np.asarray(model_lib.row_tokens(spec, tok_params, encoded.numeric,
                                           encoded.categorical))
  gen_params = _fit(workdir, f"{tag}-{variant}-generator",
                    lambda k: gen_lib.init(k, spec.vocab_sizes, spec.generator),
                    gen_lib.make_loss_fn(spec.vocab_sizes, spec.generator),
                    training.rows_batch_fn(tokens, g.train.batch_size, "tokens"), g,
                    f"{tag}-{tc}-{tokens.sum()}", seed)
  return spec, model_lib.QTabParams(tok_params, gen_params), tokens


def fit_diffusion(config, workdir: str, encoded: tables.Encoded, cardinalities, seed: int,
                  tag: str):
  d = config.diffusion
  """TabDDPM (Gaussian + multinomial diffusion) with its own AdamW and linear decay."""
  dc = diffusion_lib.DiffusionConfig(num_timesteps=d.num_timesteps, hidden=d.hidden,
                                     depth=d.depth, learning_rate=d.learning_rate)
  d_num = encoded.numeric.shape[1]
  params = _fit(workdir, f"{tag}-diffusion",
                lambda k: diffusion_lib.init(k, dc, d_num, cardinalities),
                diffusion_lib.make_loss_fn(dc, d_num, cardinalities),
                diffusion_lib.make_batch_fn(encoded.numeric, encoded.categorical,
                                            d.train.batch_size), d, tag, seed,
                opt=diffusion_lib.optimizer(dc, d.train.num_steps))
  return dc, params


def score(train: tables.Table, test: tables.Table, synthetic: pd.DataFrame, seed: int) -> dict:
  """The metrics every method gets."""
  s = train.schema
  out = dict(metrics.fidelity(train.frame, synthetic, s))
  out["detection"] = float(metrics.detection(train.frame, synthetic, s, seed=seed))
  dcr = metrics.dcr(train.frame, test.frame, synthetic, s, num_rows_subsample=_DCR_ROWS,
                    seed=seed)
  out["dcr_share"] = float(dcr["share_closer_to_train"])
  with threadpoolctl.threadpool_limits(1, user_api="openmp"):  # JAX holds the cores
    out["mle"] = float(metrics.mle(synthetic, test.frame, s, seed=seed))
  out.update(metrics.alpha_precision_beta_recall(train.frame, synthetic, s, seed=seed))
  return {k: float(v) for k, v in out.items()}


def code_stats(spec, tokens, train_tokens, train, synthetic, seed: int) -> dict:
  """Claim 3: distinct numeric codes, the unseen ones, and how plausible their rows are."""
  codes = model_lib.numeric_code_tuples(spec, tokens)
  train_codes = model_lib.numeric_code_tuples(spec, train_tokens)
  unseen = metrics.unseen_mask(codes, train_codes)
  rng = np.random.default_rng(seed)
  probe = rng.permutation(np.flatnonzero(unseen))[:_DCR_ROWS]
  dist = metrics.distances_to_closest_record(train.frame, synthetic.iloc[probe], train.schema)
  out = {"distinct_codes": float(metrics.distinct_codes(codes)),
         "train_rows": float(len(train_codes)),
         "train_distinct_codes": float(metrics.distinct_codes(train_codes)),
         "unseen_share": float(np.mean(unseen)),
         "unseen_dcr_median": float(np.median(dist)) if len(probe) else np.nan,
         "unseen_zero_dcr_share": float(np.mean(dist == 0)) if len(probe) else np.nan}
  m = min(int(unseen.sum()), int((~unseen).sum()))
  if m >= _MIN_SUBSET:  # equal-size subsets, so the two detection scores compare
    pick = lambda mask: synthetic.iloc[rng.choice(np.flatnonzero(mask), m, replace=False)]
    out["detection_unseen"] = float(metrics.detection(train.frame, pick(unseen), train.schema,
                                                      seed=seed))
    out["detection_seen"] = float(metrics.detection(train.frame, pick(~unseen), train.schema,
                                                    seed=seed))
  return out


def known_rows(encoder: tables.TableEncoder, frame: pd.DataFrame, limit: int) -> pd.DataFrame:
  """Held-out rows whose categories all occur in training (the ones that can be encoded)."""
  keep = np.ones(len(frame), bool)
  for column, cats in zip(encoder.schema.categorical, encoder.categories):
    keep &= frame[column].isin(cats).to_numpy()
  return frame[keep].iloc[:limit]


def imputation(spec, params, encoder, test: tables.Table, config, seed: int) -> dict:
  """Accuracy of each categorical column imputed from all the others (Q-Tab's
  conditional sampler, one column masked at a time)."""
  frame = known_rows(encoder, test.frame, config.evaluation.imputation_rows)
  if not len(frame) or not spec.cardinalities:
    return {}
  enc = encoder.encode(frame)
  out = {}
  for j, column in enumerate(encoder.schema.categorical):
    known = np.ones(enc.categorical.shape, bool)
    known[:, j] = False
    x_num, x_cat = model_lib.impute(spec, params, jax.random.PRNGKey(seed + 7 * j),
                                    enc.numeric, enc.categorical, known,
                                    **_sampling(config))
    imputed = encoder.decode(tables.Encoded(np.asarray(x_num), np.asarray(x_cat)))
    out.update(metrics.imputation_accuracy(frame[[column]], imputed[[column]], [column],
                                           test.schema))
  return {f"impute_{k}": float(v) for k, v in out.items()}


def _sampling(config) -> dict:
  s = config.sampling
  return dict(steps=s.steps, temperature=s.temperature, order=s.order)


def _decode(encoder, x_num, x_cat) -> pd.DataFrame:
  return encoder.decode(tables.Encoded(np.asarray(x_num, np.float32),
                                       np.asarray(x_cat, np.int32)))


def qtab_row(config, workdir, data, variant: str, seed: int, tag: str) -> dict:
  train, test, encoder, encoded = data
  spec, params, train_tokens = fit_qtab(config, workdir, encoded, encoder.cardinalities,
                                        variant, seed, tag)
  n = config.evaluation.num_samples or len(train.frame)
  # code_factor x n rows for the code statistics (more distinct codes than training rows
  # needs more generated rows than that); the first n are the synthetic table.
  x_num, x_cat, tokens = model_lib.generate(spec, params, jax.random.PRNGKey(seed),
                                            n * config.evaluation.code_factor,
                                            **_sampling(config))
  everything = _decode(encoder, x_num, x_cat)
  synthetic = everything.iloc[:n].reset_index(drop=True)
  row = score(train, test, synthetic, seed)
  row["reconstruction_mse"] = float(model_lib.reconstruction_error(
      spec, params.tokenizer, jnp.asarray(encoded.numeric)))
  row.update(code_stats(spec, tokens, train_tokens, train, everything, seed))
  row.update(imputation(spec, params, encoder, test, config, seed))
  return row, synthetic


def baseline_row(config, workdir, data, method: str, seed: int, tag: str) -> dict:
  train, test, encoder, encoded = data
  n = config.evaluation.num_samples or len(train.frame)
  if method == "copula":
    model = copula_lib.GaussianCopula(train.schema, config.copula.numerical_distribution,
                                      seed=seed).fit(train.frame)
    synthetic = model.sample(n, seed=seed)
  elif method == "diffusion":
    dc, params = fit_diffusion(config, workdir, encoded, encoder.cardinalities, seed, tag)
    x_num, x_cat = diffusion_lib.sample(params, jax.random.PRNGKey(seed), n, dc,
                                        encoded.numeric.shape[1], encoder.cardinalities)
    synthetic = _decode(encoder, x_num, x_cat)
  else:  # "real": the training rows themselves, the ceiling every metric is read against
    synthetic = train.frame
  return score(train, test, synthetic, seed), synthetic


def _table_rows(config, workdir: str, name: str, log, done) -> list[dict]:
  rows, data = [], None
  methods = [*config.variants, *config.baselines, "real"]
  for seed in range(config.seed, config.seed + config.num_seeds):
    for method in methods:
      row = done.get((name, seed, method))
      if row is None:
        if data is None:
          train, test = load(config, name)
          encoder = tables.TableEncoder.fit(train, config.max_categories, seed=config.seed)
          data = (train, test, encoder, encoder.encode(train.frame))
        fn = qtab_row if method in config_module.VARIANTS else baseline_row
        row, synthetic = fn(config, workdir, data, method, seed, f"{name}-s{seed}")
        if seed == config.seed:
          save_samples(workdir, name, method, synthetic)
        row = log.append({"table": name, "seed": seed, "method": method,
                          "task": data[0].schema.task, **row})
        # Each model compiles its own programs; XLA:CPU keeps every one mapped, and a
        # whole run's worth exhausts the kernel's vm.max_map_count.
        jax.clear_caches()
      rows.append(row)
  return rows


def _samples_path(workdir: str, table: str, method: str) -> str:
  return os.path.join(workdir, "samples", f"{table}-{method}.csv")


def save_samples(workdir: str, table: str, method: str, frame: pd.DataFrame) -> None:
  """The first seed's generated rows (atomic), for the plots and for users to inspect."""
  path = _samples_path(workdir, table, method)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  frame.to_csv(path + ".tmp", index=False)
  os.replace(path + ".tmp", path)


def first_table_samples(config, workdir: str) -> dict[str, pd.DataFrame]:
  """{method: rows} of the first table and seed, as saved by `save_samples`."""
  out = {}
  for method in ("real", "qtab", *config.baselines):
    path = _samples_path(workdir, config.tables[0], method)
    if os.path.exists(path):
      out[method] = pd.read_csv(path, dtype=str)
  return out


@report.register("qtab", title="Q-Tab: codebook tabular generation with residual LFQ",
                 validate=config_module.validate)
def run(config, workdir: str) -> report.Result:
  config_module.preflight(config)
  fp = trials.config_fingerprint(config, exclude=_NOT_RESULTS)
  rows = []
  with trials.TrialLog(os.path.join(workdir, "evals.jsonl"), fp) as log:
    done = log.done(lambda r: (r["table"], r["seed"], r["method"]))
    for name in config.tables:
      rows += _table_rows(config, workdir, name, log, done)
  files = [plots.mle_bars(workdir, rows, config), plots.fidelity_bars(workdir, rows, config)]
  train, _ = load(config, config.tables[0])
  samples = first_table_samples(config, workdir)
  files.append(plots.marginals(workdir, train.schema, samples))
  files.append(plots.pair_correlations(workdir, train.schema, samples))
  return report.Result(claims=report.claims_table(claims(rows, config)),
                       figures=figures(rows, config), plots=files)


def _mean_se(rows, table: str, method: str, key: str) -> tuple[float, float]:
  got = [r[key] for r in rows if r["table"] == table and r["method"] == method
         and r.get(key) is not None and np.isfinite(r[key])]
  if not got:
    return float("nan"), float("nan")
  return float(np.mean(got)), float(np.std(got) / np.sqrt(len(got)))


def _m(rows, table, method, key) -> float:
  return _mean_se(rows, table, method, key)[0]


def claims(rows: list[dict], config) -> list[report.Claim]:
  e, ts, base = config.evaluation, config.tables, config.baselines
  n = f"{config.num_seeds} seeds, {len(ts)} tables"
  out = []
  if base:
    wins = [all(_m(rows, t, "qtab", "mle") >= _m(rows, t, b, "mle") - e.mle_margin
                for b in base) for t in ts]
    out.append(report.Claim(
        f"Q-Tab's MLE is at least every baseline's ({', '.join(base)}; within "
        f"{e.mle_margin}) on most tables ({n})", "state-of-the-art predictive utility",
        "; ".join(f"{t}: " + ", ".join(f"{m} {_m(rows, t, m, 'mle'):.3f}"
                                       for m in ("qtab", *base, "real")) for t in ts),
        float(np.mean(wins)), ">", 0.5))
  if "diffusion" in base:
    gaps = [_m(rows, t, "diffusion", k) - _m(rows, t, "qtab", k)
            for t in ts for k in ("column_shapes", "pair_trends")]
    out.append(report.Claim(
        f"Q-Tab's column shapes and pair trends are within {e.fidelity_margin} of the "
        f"diffusion model's, or better ({n})", "matches the fidelity of diffusion generators",
        "; ".join(f"{t}: shapes {_m(rows, t, 'qtab', 'column_shapes'):.3f} vs "
                  f"{_m(rows, t, 'diffusion', 'column_shapes'):.3f}, trends "
                  f"{_m(rows, t, 'qtab', 'pair_trends'):.3f} vs "
                  f"{_m(rows, t, 'diffusion', 'pair_trends'):.3f}" for t in ts),
        gaps, "<=", e.fidelity_margin))
  out.append(_codes_claim(rows, config))
  out.append(_residual_claim(rows, config))
  return [c for c in out if c is not None]


def _codes_claim(rows, config) -> report.Claim:
  ts = config.tables
  ratio = [_m(rows, t, "qtab", "distinct_codes") / _m(rows, t, "qtab", "train_rows") for t in ts]
  also = [([_m(rows, t, "qtab", "unseen_dcr_median") for t in ts], ">", 0.0)]
  text = "; ".join(f"{t}: {_m(rows, t, 'qtab', 'distinct_codes'):.0f} codes / "
                   f"{_m(rows, t, 'qtab', 'train_rows'):.0f} rows, unseen DCR "
                   f"{_m(rows, t, 'qtab', 'unseen_dcr_median'):.3f}, detection unseen "
                   f"{_m(rows, t, 'qtab', 'detection_unseen'):.2f} vs seen "
                   f"{_m(rows, t, 'qtab', 'detection_seen'):.2f}" for t in ts)
  if "no_corruption" in config.variants:
    also.append(([_m(rows, t, "qtab", "distinct_codes") - _m(rows, t, "no_corruption",
                                                            "distinct_codes") for t in ts],
                 ">", 0.0))
    text += "; without corruption: " + ", ".join(
        f"{_m(rows, t, 'no_corruption', 'distinct_codes'):.0f}" for t in ts)
  gaps = [_m(rows, t, "qtab", "detection_seen") - _m(rows, t, "qtab", "detection_unseen")
          for t in ts]
  gaps = [g for g in gaps if np.isfinite(g)]
  if gaps:
    also.append((gaps, "<=", 0.1))
  return report.Claim(
      "Generated rows use more distinct numeric codes than there are training rows, "
      "corruption raises the count, and rows from unseen codes are plausible (median DCR > "
      "0; detection within 0.1 of seen-code rows')", "a code space larger than the data",
      text, ratio, ">", 1.0, also=also)


def _residual_claim(rows, config):
  ablations = [v for v in ("plain_lfq", "no_corruption") if v in config.variants]
  if not ablations:
    return None
  ts = config.tables
  gain = lambda v, k: float(np.mean([_m(rows, t, "qtab", k) - _m(rows, t, v, k) for t in ts]))
  margins = [max(gain(v, k) for k in ("mle", "column_shapes", "pair_trends"))
             for v in ablations]
  return report.Claim(
      f"Residual LFQ with corruption beats {' and '.join(ablations)} on MLE or fidelity "
      "(mean gain over tables > 0 on at least one of MLE, column shapes, pair trends)",
      "the residual structure matters",
      "; ".join(f"{t}: " + ", ".join(f"{m} MLE {_m(rows, t, m, 'mle'):.3f} shapes "
                                     f"{_m(rows, t, m, 'column_shapes'):.3f}"
                                     for m in ("qtab", *ablations)) for t in ts),
      margins, ">", 0.0)


def figures(rows: list[dict], config) -> dict[str, float]:
  out = {}
  keys = sorted({k for r in rows for k, v in r.items() if isinstance(v, float)} - {"seed"})
  for t in config.tables:
    for m in (*config.variants, *config.baselines, "real"):
      for k in keys:
        mean, se = _mean_se(rows, t, m, k)
        if np.isfinite(mean):
          out[f"{t}_{m}_{k}"], out[f"{t}_{m}_{k}_se"] = mean, se
  return out
