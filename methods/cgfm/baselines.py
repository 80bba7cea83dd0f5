"""The baselines CGFM is compared with, with the same signatures as the method.

- The single-level graph network (MeshGraphNet style): `HieraGraphNet` applied to a
  `MultiscaleGraph` with one level (`graphs.build(..., coarse=())`); give it as many
  blocks as the hierarchical model runs in total, `single_level_blocks`, so the two
  have the same message-passing depth.
- Naive coarsening: the same hierarchy built by `coarsening.build_hierarchy` with
  `method="random"` (uniform random node selection) or `method="voxel"` (uniform
  voxel clustering), both blind to mesh topology and density.
"""

from __future__ import annotations

NAIVE_COARSENING = ("random", "voxel")


def single_level_blocks(blocks_per_level: int, num_levels: int) -> int:
  """Blocks a one-level network needs to match a U-shaped one's depth: B (2L - 1).

  The U runs B blocks at each of the L levels on the way down and B more at each of
  the L - 1 finer levels on the way up.

  Args:
    blocks_per_level: B of the hierarchical network.
    num_levels: L, its number of levels.

  Returns:
    B (2L - 1).

  Example:
    >>> single_level_blocks(1, 3)   # 5
  """
  return blocks_per_level * (2 * num_levels - 1)
