"""Synthetic inputs for studying the estimator and the selection.

`query_at_cosine` builds unit query vectors at a prescribed cosine to unit keys (the
estimator's error depends on d and on <o, q> only). `synthetic_cache` builds a
KV cache shaped like a real LLM's: keys with a non-zero mean and a few large outlier
channels, and queries of two kinds, peaked (a few relevant tokens carry the
attention) and flat (many tokens share it), so top-p's budget has something to adapt to.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

PEAKED_ALPHA, FLAT_ALPHA = 24.0, 16.0   # query scales of the peaked and the flat queries
PEAKED_TOKENS, FLAT_TOKENS = 4, 64      # relevant tokens per peaked / flat query


def query_at_cosine(o: jax.Array, e: jax.Array, cos: jax.Array) -> jax.Array:
  """Unit queries q with <o, q> = cos, in the plane of o and e:

      e_perp = (e - <e, o> o) / ||e - <e, o> o||,    q = cos o + sqrt(1 - cos^2) e_perp.

  Args:
    o: (..., D) unit vectors.
    e: (..., D) any vectors not parallel to o (e.g. Gaussian draws): the direction
      of q's component orthogonal to o.
    cos: (..., 1) or broadcastable cosines in [-1, 1].

  Returns:
    (..., D) unit vectors q.

  Example:
    >>> o = jnp.array([1.0, 0.0]); e = jnp.array([0.3, 2.0])
    >>> query_at_cosine(o, e, jnp.array([0.6]))
    Array([0.6, 0.8], dtype=float32)
  """
  if not isinstance(cos, jax.core.Tracer) and not np.all(np.abs(np.asarray(cos)) <= 1):
    raise ValueError(f"query_at_cosine: cos={cos!r}; expected cosines in [-1, 1] "
                     "(sqrt(1 - cos^2) would be NaN)")
  e = e - jnp.sum(e * o, axis=-1, keepdims=True) * o
  e = e / jnp.linalg.norm(e, axis=-1, keepdims=True)
  return cos * o + jnp.sqrt(1.0 - cos * cos) * e


def synthetic_cache(key: jax.Array, length: int, dim: int, num_queries: int,
                    outliers: int) -> tuple[jax.Array, jax.Array, jax.Array]:
  """A synthetic KV cache with LLM-like keys, and peaked and flat queries.

  Keys k_j = mu + sigma * z_j with z_j ~ N(0, I), sigma = 1 (3 on the `outliers`
  channels) and mu ~ N(0, 2^2 I) (+-12 on the outlier channels), as real LLM keys
  have. Query i is q_i = c_q + alpha u_i, where u_i is the unit mean direction of the
  centred keys of its relevant tokens R_i (drawn from [8, length - 56)), so a
  relevant token's logit is about alpha / sqrt(|R_i|) and the others' spread is
  alpha / sqrt(d); c_q ~ N(0, 0.5^2 I) with outlier channels 1. The first half of the
  queries are peaked (|R| = 4, alpha = 24), the second half flat (|R| = 64,
  alpha = 16). Values are N(0, I).

  Args:
    key: PRNG key.
    length: S, the number of cached tokens (> 120).
    dim: D, the head width.
    num_queries: Q.
    outliers: the number of outlier channels (< D).

  Returns:
    (q (Q, D), k (S, D), v (S, D)).

  Example:
    >>> q, k, v = synthetic_cache(jax.random.PRNGKey(0), 2048, 128, 8, 4)
  """
  if length <= 120 or not 0 <= outliers < dim or num_queries < 1:
    raise ValueError(f"synthetic_cache: length={length}, dim={dim}, num_queries={num_queries}, "
                     f"outliers={outliers}; expected length > 120, 0 <= outliers < dim and "
                     "num_queries >= 1")
  km, kz, kv, kq, kr, kc = jax.random.split(key, 6)
  sigma = jnp.ones((dim,)).at[:outliers].set(3.0)
  mu = 2.0 * jax.random.normal(km, (dim,))
  mu = mu.at[:outliers].set(12.0 * jnp.sign(jax.random.normal(kc, (outliers,))))
  k = mu + sigma * jax.random.normal(kz, (length, dim))
  v = jax.random.normal(kv, (length, dim))
  q_center = 0.5 * jax.random.normal(kq, (dim,))
  q_center = q_center.at[:outliers].set(1.0)
  qs = []
  for i in range(num_queries):
    m, alpha = ((PEAKED_TOKENS, PEAKED_ALPHA) if i < num_queries // 2
                else (FLAT_TOKENS, FLAT_ALPHA))
    rel = jax.random.choice(jax.random.fold_in(kr, i), length - 64, (m,), replace=False) + 8
    cen = k[rel] - mu
    u = jnp.sum(cen / jnp.linalg.norm(cen, axis=-1, keepdims=True), axis=0)
    qs.append(q_center + alpha * u / jnp.linalg.norm(u))
  return jnp.stack(qs), k, v
