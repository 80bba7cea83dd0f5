"""Benchmark: homogenisation solves per second, ours (matrix-free multigrid-CG in JAX,
jitted and vmapped over a batch of cells) against the same FEM assembled with
``scipy.sparse`` and factorised once per cell with SuperLU.

  python -m experiments.benchmarks.automs [--sizes=32,64,128] [--batch=20]
      [--repeats=5] [--preconditioners=multigrid] [--seed=0] [--tiny]

The cell problem (both sides, float64): the unit cell [0, 1]^2 as n x n bilinear Q4
elements, periodic; SIMP densities with the default ``common.physics.Material``
(E 1 / 1e-3, kappa 1 / 1e-3: contrast 1e-3, nu = 0.3, alpha 1 / 1, p = 3) but the
void expansion set to 2.0 so alpha^H is not trivial. Per cell: elasticity (3 unit
strains + the unit heating, one operator), conduction (2 unit gradients), then C^H
(3 x 3), kappa^H (2 x 2) and alpha^H = C^H^-1 beta^H, i.e. the full
``common.physics.homogenize``.

- ours: ``jax.jit(jax.vmap(homogenize))`` over ``--batch`` cells (default
  preconditioner: a Galerkin geometric multigrid V-cycle; ``--preconditioners=
  multigrid,fft`` adds the FFT reference-medium preconditioner), tol 1e-7 on the
  residual. Timed: one batched call, after an untimed compiling call
  (``common.timing.median_seconds``); the compile time is reported apart.
- scipy (the peer, the textbook implementation): element matrices by 2 x 2 Gauss
  quadrature in numpy, global K assembled as COO -> CSR with periodic DOF numbering
  (node (i, j) -> i n + j), the rigid translations removed by pinning node 0, then
  ``scipy.sparse.linalg.splu`` (SuperLU, COLAMD ordering) once per operator and its
  ``solve`` on all right-hand sides at once (4 for elasticity, 2 for heat);
  homogenised tensors from the same Gauss-point energy sums. Timed: the whole cell
  (assembly + factorisation + solves + sums), looped over the cells.

Cells: smoothed lattice-like SDF cells (bars along x, y and the diagonals plus a
node disc, random widths; rho = sigmoid(-sdf / (0.5 h))), the same for both sides.
Agreement: max |ours - scipy| / max |scipy| for C^H, kappa^H and alpha^H over the
batch, required <= 1e-8. The table gives cells per second per side (batch / median
batch time for ours, cells / median loop time for scipy), the ratio, and our CG
iteration counts (max and mean over the batch; a vmapped CG runs until the slowest
cell of the batch converges). The load average is printed: the machine may be shared.
"""

from __future__ import annotations

import os
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from common import config as config_lib
from common import physics
from common import timing
from experiments.benchmarks import machine_line

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["32", "64", "128"], "Elements per side n.")
flags.DEFINE_integer("batch", 20, "Cells per batch (ours: one vmapped call).")
flags.DEFINE_integer("repeats", 5, "Timed runs per side (medians reported).")
flags.DEFINE_list("preconditioners", ["multigrid"], "Our preconditioners to time.")
flags.DEFINE_integer("seed", 0, "Seed of the cells.")
flags.DEFINE_bool("tiny", False, "A seconds-long run: size 8, batch 2, 1 repeat.")

PEERS = ("scipy",)  # a runtime dependency: listed for its version in the machine line

MATERIAL = physics.Material(alpha_void=2.0)
GAUSS = (0.5 - 0.5 / np.sqrt(3.0), 0.5 + 0.5 / np.sqrt(3.0))
OFFSETS = ((0, 0), (1, 0), (1, 1), (0, 1))
AGREEMENT = 1e-8


def lattice_cells(n: int, count: int, seed: int) -> np.ndarray:
  """(count, n, n) smoothed SDF cells: bars along x, y, the diagonals, a node disc."""
  rng = np.random.default_rng(seed)
  centres = (np.arange(n) + 0.5) / n
  x, y = np.meshgrid(centres, centres, indexing="ij")
  cells = []
  for _ in range(count):
    widths = rng.uniform(0.02, 0.12, 4) * (rng.uniform(size=4) < 0.75)
    radius = rng.uniform(0.0, 0.2)
    dx, dy = np.abs(x - 0.5), np.abs(y - 0.5)
    distances = [dy - widths[0], dx - widths[1],
                 np.abs(dx - dy) / np.sqrt(2) - widths[2],
                 np.abs(np.abs(x - y) - 0.5) / np.sqrt(2) - widths[3],
                 np.hypot(dx, dy) - radius]
    sdf = np.min(distances, axis=0)
    cells.append(1 / (1 + np.exp(np.clip(sdf / (0.5 / n), -60, 60))))
  return np.stack(cells)


# --- The peer: the same FEM with scipy.sparse and SuperLU.

def gradient_matrices(n: int, c: int) -> list[np.ndarray]:
  """B at the 4 Gauss points: (3, 8) strains (c = 2) or (2, 4) gradients (c = 1)."""
  h, out = 1.0 / n, []
  for s in GAUSS:
    for t in GAUSS:
      dn_ds = np.array([-(1 - t), 1 - t, t, -t]) / h
      dn_dt = np.array([-(1 - s), -s, s, 1 - s]) / h
      if c == 1:
        out.append(np.stack([dn_ds, dn_dt]))
        continue
      b = np.zeros((3, 8))
      b[0, 0::2], b[1, 1::2] = dn_ds, dn_dt
      b[2, 0::2], b[2, 1::2] = dn_dt, dn_ds
      out.append(b)
  return out


def element_dofs(n: int, c: int) -> np.ndarray:
  """(n^2, 4 c) global dofs of every element, element e = i n + j, node (i, j) ->
  (i mod n) n + (j mod n), dof = node c + component."""
  i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
  nodes = [((i + di) % n) * n + (j + dj) % n for di, dj in OFFSETS]
  return np.stack([nodes[k].ravel() * c + a for k in range(4) for a in range(c)], axis=1)


def scipy_cell_problem(w: np.ndarray, eps0: np.ndarray, d: np.ndarray, c: int):
  """Gram matrix G_kl = sum_e w_e (h^2/4) sum_g eps_gk^T D eps_gl, eps_g = eps0 + B_g u,
  with K u_k = -sum_e w_e int B^T D eps0_k; eps0 (r, n^2, q) per element."""
  import scipy.sparse as sp  # pylint: disable=import-outside-toplevel
  import scipy.sparse.linalg as spla  # pylint: disable=import-outside-toplevel
  n = int(round(np.sqrt(w.size)))
  w, area = w.ravel(), 1.0 / n**2
  bs, dofs = gradient_matrices(n, c), element_dofs(n, c)
  ke = sum(b.T @ d @ b for b in bs) * area / 4
  coupling = sum(b.T @ d for b in bs) * area / 4                        # (4c, q)
  rows, cols = np.repeat(dofs, 4 * c, axis=1), np.tile(dofs, (1, 4 * c))
  size = c * n * n
  k = sp.coo_matrix(((w[:, None, None] * ke).ravel(), (rows.ravel(), cols.ravel())),
                    shape=(size, size)).tocsr()
  fe = -np.einsum("e,iq,req->eir", w, coupling, eps0)                  # (n^2, 4c, r)
  f = np.zeros((size, eps0.shape[0]))
  np.add.at(f, dofs.ravel(), fe.reshape(-1, eps0.shape[0]))
  free = np.arange(c, size)                                              # pin node 0
  u = np.zeros_like(f)
  u[free] = spla.splu(k[free][:, free].tocsc()).solve(f[free])
  ue = u[dofs]                                                           # (n^2, 4c, r)
  g = 0.0
  for b in bs:
    eps = eps0.transpose(1, 2, 0) + np.einsum("qi,eir->eqr", b, ue)      # (n^2, q, r)
    g = g + np.einsum("e,eqk,qp,epl->kl", w, eps, d, eps) * area / 4
  return 0.5 * (g + g.T)


def scipy_homogenize(rho: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(C^H, kappa^H, alpha^H) of one cell, as ``common.physics.homogenize``."""
  m = MATERIAL
  simp = rho.ravel() ** m.penal
  E = m.E_void + simp * (m.E_solid - m.E_void)
  kappa = m.kappa_void + simp * (m.kappa_solid - m.kappa_void)
  alpha = m.alpha_void + rho.ravel() * (m.alpha_solid - m.alpha_void)
  nu, ne = m.nu, rho.size
  d = np.array([[1, nu, 0], [nu, 1, 0], [0, 0, (1 - nu) / 2]]) / (1 - nu**2)
  unit = np.broadcast_to(np.eye(3)[:, None, :], (3, ne, 3))
  heating = -alpha[None, :, None] * np.array([1.0, 1.0, 0.0])
  g = scipy_cell_problem(E, np.concatenate([unit, heating]), d, 2)
  C = g[:3, :3]
  kappa_h = scipy_cell_problem(kappa, np.broadcast_to(np.eye(2)[:, None, :], (2, ne, 2)),
                               np.eye(2), 1)
  return C, kappa_h, np.linalg.solve(C, -g[:3, 3])


# --- The comparison.

def relative_gap(ours: np.ndarray, peer: np.ndarray) -> float:
  return float(np.abs(ours - peer).max() / np.abs(peer).max())


def bench_size(n: int, preconditioner: str, batch: int, repeats: int) -> dict:
  cells = lattice_cells(n, batch, FLAGS.seed + n)
  fn = jax.jit(jax.vmap(lambda r: physics.homogenize(r, MATERIAL,
                                                     preconditioner=preconditioner)))
  rho = jnp.asarray(cells)
  start = time.perf_counter()
  props = jax.block_until_ready(fn(rho))
  compile_s = time.perf_counter() - start
  ours_s = timing.median_seconds(lambda: fn(rho), repeats, warmup=False)
  peer = [scipy_homogenize(cell) for cell in cells]
  peer_s = timing.median_seconds(lambda: [scipy_homogenize(cell) for cell in cells],
                                 repeats, warmup=False)
  gap = max(relative_gap(np.asarray(getattr(props, name)[i]), peer[i][k])
            for i in range(batch) for k, name in enumerate(("C", "kappa", "alpha")))
  iterations = np.asarray(props.iterations)
  return {"n": n, "ours_s": ours_s, "peer_s": peer_s, "compile_s": compile_s,
          "gap": gap, "max_it": int(iterations.max()), "mean_it": float(iterations.mean())}


def parse_flags(argv: list[str]) -> list[str]:
  rest = config_lib.parse_flags_or_die(FLAGS, argv)
  try:
    sizes = [int(s) for s in FLAGS.sizes]
  except ValueError:
    config_lib.die(f"--sizes must be integers, got {','.join(FLAGS.sizes)}")
  if min(sizes) < 4 or FLAGS.batch < 1 or FLAGS.repeats < 1:
    config_lib.die(f"--sizes must be >= 4 and --batch, --repeats >= 1, got sizes "
                   f"{sizes}, batch {FLAGS.batch}, repeats {FLAGS.repeats}")
  unknown = set(FLAGS.preconditioners) - set(physics.PRECONDITIONERS)
  if unknown:
    config_lib.die(f"--preconditioners has {sorted(unknown)}; expected values from "
                   f"{physics.PRECONDITIONERS}")
  return rest


def main(argv):
  del argv
  print(machine_line(PEERS), flush=True)
  jax.config.update("jax_enable_x64", True)
  sizes = [8] if FLAGS.tiny else [int(s) for s in FLAGS.sizes]
  batch, repeats = (2, 1) if FLAGS.tiny else (FLAGS.batch, FLAGS.repeats)
  print(f"numpy {np.__version__}; float64, batch {batch}, {repeats} repeats")
  print("| n | ours | ours (cells/s) | scipy splu (cells/s) | ours / scipy | "
        "CG its max (mean) | compile (s) | max rel. gap |")
  print("|---|---|---|---|---|---|---|---|")
  failed = False
  for preconditioner in FLAGS.preconditioners:
    for n in sizes:
      r = bench_size(n, preconditioner, batch, repeats)
      failed |= not r["gap"] <= AGREEMENT
      print(f"| {n} | {preconditioner} | {batch / r['ours_s']:.1f} | "
            f"{batch / r['peer_s']:.2f} | {r['peer_s'] / r['ours_s']:.1f}x | "
            f"{r['max_it']} ({r['mean_it']:.1f}) | {r['compile_s']:.1f} | "
            f"{r['gap']:.1e} |", flush=True)
  print(f"\nagreement (max rel. gap <= {AGREEMENT:g}): {'no' if failed else 'yes'}; "
        f"load average now {os.getloadavg()[0]:.2f}")
  if failed:
    config_lib.die(f"ours and scipy disagree by more than {AGREEMENT:g}")


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
