"""Decode-step attention over gathered (selected) tokens (Pallas kernel + jnp reference).

Each of R rows (a batch element and query head) has one query q and K gathered
keys/values with a validity mask m (tokens the selection kept). The output is the
exact softmax attention restricted to the valid tokens:

    out = sum_j m_j exp(s_j - max) v_j / sum_j m_j exp(s_j - max),   s_j = scale q . k_j

The kernel processes K in blocks of `block_k` with the flash-decoding online softmax
(running max m, running normaliser l, running numerator acc):

    m' = max(m, max_j s_j);  l' = l e^{m - m'} + sum_j e^{s_j - m'};
    acc' = acc e^{m - m'} + sum_j e^{s_j - m'} v_j;     out = acc / l

A row with no valid token returns zeros.

Shapes:
  q     (R, D)      float
  k, v  (R, K, D)   float (gathered)
  mask  (R, K)      bool
  returns (R, D) float32
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

_NEG = -1e30


@dataclasses.dataclass(frozen=True)
class SparseDecodeBlocks:
  """Tile sizes: rows per program and keys per online-softmax step (the kernel uses
  gcd(R, block_rows) and gcd(K, block_k), so any R and K work)."""
  block_rows: int = 8
  block_k: int = 128


def _check(q, k, v, mask):
  if q.ndim != 2 or k.ndim != 3 or k.shape != v.shape or k.shape[0] != q.shape[0] or (
      k.shape[2] != q.shape[1]) or mask.shape != k.shape[:2]:
    raise ValueError(f"need q (R, D), k = v (R, K, D), mask (R, K); got q {q.shape}, "
                     f"k {k.shape}, v {v.shape}, mask {mask.shape}")


def sparse_decode_attention_reference(q, k, v, mask, *, scale: float | None = None):
  """Plain-jnp version of `sparse_decode_attention` (same signature and outputs)."""
  _check(q, k, v, mask)
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  s = jnp.einsum("rd,rkd->rk", q.astype(jnp.float32), k.astype(jnp.float32)) * scale
  s = jnp.where(mask, s, _NEG)
  m = jnp.max(s, axis=-1, keepdims=True)
  p = jnp.where(mask, jnp.exp(s - m), 0.0)
  l = jnp.sum(p, axis=-1, keepdims=True)
  out = jnp.einsum("rk,rkd->rd", p, v.astype(jnp.float32))
  return jnp.where(l > 0, out / jnp.where(l > 0, l, 1.0), 0.0)


def _kernel(q_ref, k_ref, v_ref, mask_ref, out_ref, *, block_k, scale):
  q = q_ref[...].astype(jnp.float32)                 # (br, D)
  br, d = q.shape
  num_blocks = k_ref.shape[1] // block_k

  def body(i, carry):
    m, l, acc = carry
    start = i * block_k
    k = k_ref[:, pl.ds(start, block_k), :].astype(jnp.float32)    # (br, bk, D)
    v = v_ref[:, pl.ds(start, block_k), :].astype(jnp.float32)
    valid = mask_ref[:, pl.ds(start, block_k)] != 0                 # (br, bk)
    s = jnp.sum(q[:, None, :] * k, axis=-1) * scale
    s = jnp.where(valid, s, _NEG)
    m_new = jnp.maximum(m, jnp.max(s, axis=-1))
    alpha = jnp.exp(m - m_new)
    p = jnp.where(valid, jnp.exp(s - m_new[:, None]), 0.0)
    l_new = l * alpha + jnp.sum(p, axis=-1)
    acc_new = acc * alpha[:, None] + jnp.sum(p[:, :, None] * v, axis=1)
    return m_new, l_new, acc_new

  init = (jnp.full((br,), _NEG, jnp.float32), jnp.zeros((br,), jnp.float32),
          jnp.zeros((br, d), jnp.float32))
  _, l, acc = jax.lax.fori_loop(0, num_blocks, body, init)
  out_ref[...] = jnp.where(l[:, None] > 0, acc / jnp.where(l > 0, l, 1.0)[:, None], 0.0)


@functools.partial(jax.jit, static_argnames=("blocks", "scale", "interpret"))
def sparse_decode_attention(q, k, v, mask, *, scale: float | None = None,
                            blocks: SparseDecodeBlocks = SparseDecodeBlocks(),
                            interpret: bool = False) -> jax.Array:
  """Softmax attention of q (R, D) over the valid gathered k, v (R, K, D) -> (R, D).

  scale defaults to 1/sqrt(D). See the module docstring for the online softmax.
  """
  _check(q, k, v, mask)
  r, kk, d = k.shape
  scale = d ** -0.5 if scale is None else scale
  br, bk = math.gcd(r, blocks.block_rows), math.gcd(kk, blocks.block_k)
  kernel = functools.partial(_kernel, block_k=bk, scale=float(scale))
  return pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((r, d), jnp.float32),
      grid=(r // br,),
      in_specs=[
          pl.BlockSpec((br, d), lambda i: (i, 0)),
          pl.BlockSpec((br, kk, d), lambda i: (i, 0, 0)),
          pl.BlockSpec((br, kk, d), lambda i: (i, 0, 0)),
          pl.BlockSpec((br, kk), lambda i: (i, 0)),
      ],
      out_specs=pl.BlockSpec((br, d), lambda i: (i, 0)),
      interpret=interpret,
  )(q, k, v, mask.astype(jnp.int32))
