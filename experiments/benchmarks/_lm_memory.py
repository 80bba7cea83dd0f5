"""Peak memory of one side of the LM benchmark's SmolLM2 section, in a fresh process.

  python -m experiments.benchmarks._lm_memory --side=ours|theirs --folder=DIR \
      --batch=8 --prompt=32 --new_tokens=64 --prefill_len=512

`experiments/benchmarks/lm.py` starts it once per side on the Hugging Face folder it
exported (the same float32 tensors for both sides). The process imports only its own
side's library (jax, or torch + transformers: importing jax alone is ~170 MB resident),
loads the folder, and runs the section's largest workloads twice: greedy generation of
``new_tokens`` tokens after a (batch, prompt) prompt, then a (1, prefill_len) prefill
with all logits and with the last position's. Ours: ``sampling.generate`` and a jitted
``model.apply``; theirs: ``generate`` with transformers' default (dynamic) cache and
``model(ids, use_cache=True)``, eager, 1 torch thread, under ``torch.inference_mode``.

It prints one JSON line, in bytes: ``loaded`` (VmRSS after loading and handing the
loader's freed heap back to the kernel: runtime + weights; transformers maps the
safetensors file and reads the weights in on first use, so its figure holds only part of
them), ``first`` (the peak during the first run: ours with XLA's compilation of its
programs) and ``steady`` (the peak during the second run). Peaks are /proc/self/status's
VmHWM after resetting it (writing 5 to /proc/self/clear_refs, Linux >= 4.0); where the
reset fails, ``reset`` is false and the peaks count from the process's start. Not a
benchmark (its name starts with "_"): the smoke test does not run it, and ``lm --tiny``
skips it (two fresh processes that import jax or torch cost ~15 s); ``lm --model=smollm2``
runs it.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json

import numpy as np

from experiments.benchmarks import proc_status_bytes


def reset_peak() -> bool:
  """Resets VmHWM to the current VmRSS; False where the kernel refuses."""
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    return True
  except OSError:
    return False


def release_freed_heap() -> None:
  """Returns freed heap pages to the kernel (glibc's ``malloc_trim``; a no-op elsewhere).

  Loading leaves hundreds of MB of freed, still-resident heap behind (the loader's
  transposed numpy copies: ~440 MB for ours), which would otherwise count as resident.
  """
  try:
    ctypes.CDLL("libc.so.6").malloc_trim(0)
  except (OSError, AttributeError):
    pass


def _inputs(batch: int, prompt: int, prefill_len: int):
  """Deterministic ids in [1, 1001): (prompt (batch, prompt), prefill tokens (1, prefill_len))."""
  ids = lambda n: (np.arange(n) % 1000 + 1).astype(np.int32)
  return ids(batch * prompt).reshape(batch, prompt), ids(prefill_len)[None]


def _ours(folder: str, prompt: np.ndarray, tokens: np.ndarray, new_tokens: int):
  """Loads the folder into our transformer; returns the workload."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from common.models import hf  # pylint: disable=g-import-not-at-top
  from common.models import sampling  # pylint: disable=g-import-not-at-top
  from common.models import transformer  # pylint: disable=g-import-not-at-top

  ckpt = hf.load_hf_checkpoint(folder)
  model = transformer.Transformer(ckpt.config)
  params = jax.block_until_ready(jax.device_put(ckpt.params))
  del ckpt

  def prefill(params, tokens, keep):
    cache = transformer.init_cache(model.config, tokens.shape[0], tokens.shape[1])
    return model.apply({"params": params}, tokens, cache, logits_to_keep=keep)
  prefill = jax.jit(prefill, static_argnums=2)

  def run():
    jax.block_until_ready(sampling.generate(model, params, jnp.asarray(prompt),
                                            jax.random.PRNGKey(0), max_new_tokens=new_tokens,
                                            temperature=0.0))
    for keep in (None, 1):
      jax.block_until_ready(prefill(params, jnp.asarray(tokens), keep))
  return run


def _theirs(folder: str, prompt: np.ndarray, tokens: np.ndarray, new_tokens: int):
  """Loads the folder into transformers (eager, 1 thread); returns the workload."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top

  torch.set_num_threads(1)
  model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

  def run():
    with torch.inference_mode():
      ids = torch.tensor(prompt, dtype=torch.long)
      model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                     min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
      for keep in ({}, {"logits_to_keep": 1}):
        model(torch.tensor(tokens, dtype=torch.long), use_cache=True, **keep)
  return run


def measure(side: str, folder: str, batch: int, prompt: int, new_tokens: int,
            prefill_len: int) -> dict:
  """Loads one side and runs its workload twice: the resident and peak bytes."""
  prompt_ids, tokens = _inputs(batch, prompt, prefill_len)
  run = {"ours": _ours, "theirs": _theirs}[side](folder, prompt_ids, tokens, new_tokens)
  gc.collect()
  release_freed_heap()
  out = {"side": side, "loaded": proc_status_bytes("VmRSS")}
  out["reset"] = reset_peak()
  run()
  out["first"] = proc_status_bytes("VmHWM")
  gc.collect()
  reset_peak()
  run()
  out["steady"] = proc_status_bytes("VmHWM")
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--side", choices=("ours", "theirs"), required=True)
  parser.add_argument("--folder", required=True)
  for name in ("batch", "prompt", "new_tokens", "prefill_len"):
    parser.add_argument(f"--{name}", type=int, required=True)
  args = parser.parse_args()
  print(json.dumps(measure(args.side, args.folder, args.batch, args.prompt, args.new_tokens,
                           args.prefill_len)), flush=True)


if __name__ == "__main__":
  main()
