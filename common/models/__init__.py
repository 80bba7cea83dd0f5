"""Flax models shared by the methods, used functionally (`init` / `apply`)."""

from common.models.mlp import MLP

__all__ = ["MLP"]
