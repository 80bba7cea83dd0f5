"""The linguistic channel: a short symbolic description of an egocentric grid view.

xminigrid's view is (V, V, 2) (tile id, colour id), aligned so that the agent sits at
row V-1, column V//2, facing up (row V-2 is the cell in front of it). A description is
six tokens, one per slot:

    front tile, front colour      the cell the agent faces
    object tile, object colour    the nearest visible object (not empty, floor or wall)
    object side, object distance  left / ahead / right of the agent's column (or none),
                                  Manhattan distance 1, 2, 3, >= 4 (or none)

e.g. "front: floor black; nearest: key yellow, left, 2". Each slot has its own small
vocabulary (`SLOTS`); the world model decodes them in order.

Example:
    >>> tokens = describe(obs)          # (..., 6) int32
    >>> to_text(tokens[0])
    'front: wall grey; nearest: key yellow, left, 2'
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

TILE_WORDS = ("empty", "floor", "wall", "ball", "square", "pyramid", "goal", "key",
              "locked-door", "closed-door", "open-door", "hex", "star")
COLOUR_WORDS = ("none", "red", "green", "blue", "purple", "yellow", "grey", "black",
                "orange", "white", "brown", "pink")
SIDE_WORDS = ("none", "left", "ahead", "right")
DISTANCE_WORDS = ("none", "1", "2", "3", "4+")
SLOTS = (("front_tile", TILE_WORDS), ("front_colour", COLOUR_WORDS),
         ("object_tile", TILE_WORDS), ("object_colour", COLOUR_WORDS),
         ("object_side", SIDE_WORDS), ("object_distance", DISTANCE_WORDS))
SLOT_SIZES = tuple(len(words) for _, words in SLOTS)
NOT_OBJECTS = (0, 1, 2)   # empty, floor, wall


def describe(obs) -> jnp.ndarray:
  """Descriptions (..., 6) int32 of views obs (..., V, V, 2) (jit/vmap-safe)."""
  obs = jnp.asarray(obs).astype(jnp.int32)
  v = obs.shape[-2]
  me_r, me_c = obs.shape[-3] - 1, v // 2
  tile, colour = obs[..., 0], obs[..., 1]
  front = (tile[..., me_r - 1, me_c], colour[..., me_r - 1, me_c])
  rows, cols = np.meshgrid(np.arange(obs.shape[-3]), np.arange(v), indexing="ij")
  dist = np.abs(rows - me_r) + np.abs(cols - me_c)
  is_obj = ~jnp.isin(tile, jnp.asarray(NOT_OBJECTS)) & (dist > 0)
  score = jnp.where(is_obj, dist * 100 + np.abs(cols - me_c), 10**6)
  flat = score.reshape(score.shape[:-2] + (-1,))
  idx = jnp.argmin(flat, axis=-1)
  found = jnp.take_along_axis(flat, idx[..., None], -1)[..., 0] < 10**6
  pick = lambda a: jnp.take_along_axis(a.reshape(a.shape[:-2] + (-1,)), idx[..., None],
                                       -1)[..., 0]
  r, c = idx // v, idx % v
  side = jnp.where(c < me_c, 1, jnp.where(c > me_c, 3, 2))
  d = jnp.minimum(jnp.abs(r - me_r) + jnp.abs(c - me_c), 4)
  return jnp.stack([front[0], front[1], jnp.where(found, pick(tile), 0),
                    jnp.where(found, pick(colour), 0), jnp.where(found, side, 0),
                    jnp.where(found, d, 0)], axis=-1).astype(jnp.int32)


def to_text(tokens) -> str:
  """One description (6,) as words."""
  w = [words[int(t)] for (_, words), t in zip(SLOTS, np.asarray(tokens))]
  if w[2] == "empty":
    return f"front: {w[0]} {w[1]}; nearest: nothing"
  return f"front: {w[0]} {w[1]}; nearest: {w[2]} {w[3]}, {w[4]}, {w[5]}"
