"""Shared pytest fixtures.

Expensive objects (a trained model, compiled functions) are session-scoped and
shared across test files, so the suite trains each of them once.
"""

import gc
import importlib.util
import os
import shutil
import tempfile

# The whole suite compiles with XLA:CPU's LLVM backend at optimisation level 0 (XLA's
# default is 3). Most of the suite's time is compiling programs that then run on tiny
# inputs. Measured idle on the whole suite (same checkout, back to back): level 0 took
# 22 minutes of wall time (2,590 worker-seconds); level 1 was still running at 26.
# Level 0's code runs slower (a small transformer's training step 2.4x), so a few
# run-bound files lose (susceptibility claim, CGFM claim, PPO: 258 worker-seconds at
# level 0, 163 at 1, 202 at 3), but the compile-bound majority gains more. The same
# HLO runs and every assertion applies unchanged; results move by float rounding at
# most. Set before jax creates its CPU client; subprocesses and notebook kernels
# inherit it; an optimisation level already in XLA_FLAGS is kept.
SUITE_XLA_FLAG = "--xla_backend_optimization_level=0"
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {SUITE_XLA_FLAG}".strip()

import jax  # pylint: disable=wrong-import-position
import pytest  # pylint: disable=wrong-import-position

# jax's persistent compilation cache, in one folder per test session that the xdist
# workers share: a program compiled again with the same HLO (after `jax.clear_caches`,
# in the other worker, or through a fresh jit wrapper such as `jax.jit(model.init)` on
# each call) is loaded from disk instead of recompiled; it is the same executable.
# Only programs that took at least a second to compile are written. A cache size
# limit turns on the cache's file lock, so that one worker never reads an entry the
# other is still writing; without filelock (which jax needs for that) there is no cache.
_CACHE_ENV = "TESTS_JAX_COMPILATION_CACHE"
_cache_owner = pytest.StashKey[str]()


def pytest_configure(config):
  if importlib.util.find_spec("filelock") is None:
    return
  path = os.environ.get(_CACHE_ENV)
  if not path:  # The session's controller (or a run without xdist) owns the folder.
    path = tempfile.mkdtemp(prefix="jax-compilation-cache-")
    os.environ[_CACHE_ENV] = path  # inherited by the workers it starts
    config.stash[_cache_owner] = path
  jax.config.update("jax_compilation_cache_dir", path)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  jax.config.update("jax_compilation_cache_max_size", 64 << 30)


def pytest_unconfigure(config):
  path = config.stash.get(_cache_owner, None)
  if path is not None:
    shutil.rmtree(path, ignore_errors=True)
    os.environ.pop(_CACHE_ENV, None)


# The suite's longest files, started first. With `--dist loadfile` each file runs whole
# on one xdist worker, in collection order as workers free up; a long file collected
# last would leave the other worker idle at the end. The tiny-experiment claim tests
# (`*_claim.py`) and these files each take from half a minute to several minutes.
_LONG_FILES = ("test_benchmarks_smoke.py", "test_notebooks.py", "test_ppo.py",
               "test_contract.py", "test_lm_sharding.py")


def _is_long(item) -> bool:
  name = os.path.basename(str(item.path))
  return name.endswith("_claim.py") or name in _LONG_FILES


def pytest_collection_modifyitems(session, config, items):
  """Moves the long files' tests to the front (a stable sort: each file's tests, and the
  files among themselves, keep their order)."""
  del session, config
  items.sort(key=lambda item: not _is_long(item))


# XLA:CPU maps each compiled program's code into its own memory regions. A worker
# that runs hundreds of test files accumulates tens of thousands of them, and at the
# kernel's vm.max_map_count (65530 by default) LLVM's next allocation fails inside
# compilation (a segfault or "Cannot allocate memory"). Past half of that budget, the
# compiled programs are dropped between test files.
_MAP_FRACTION = 0.5


def _max_map_count():
  try:
    with open("/proc/sys/vm/max_map_count", encoding="ascii") as f:
      return int(f.read())
  except (OSError, ValueError):
    return None


def _mapped_regions():
  with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
    return sum(1 for _ in f)


@pytest.fixture(autouse=True, scope="module")
def _bounded_compiled_programs():
  """Frees jax's compiled programs after a test file once the process holds more than
  half of the memory maps the kernel allows it."""
  yield
  limit = _max_map_count()
  if limit is None:
    return
  if _mapped_regions() > _MAP_FRACTION * limit:
    jax.clear_caches()
    gc.collect()


@pytest.fixture
def rng():
  return jax.random.PRNGKey(0)


@pytest.fixture
def x64():
  """Runs the test with 64-bit floats (kernel solves are checked at tight tolerances)."""
  with jax.enable_x64(True):
    yield


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory):
  """A directory holding the tiny preset of the shared LM (`common.lm`), trained once
  per session. Experiments reuse it with ``lm_workdir=tiny_lm_dir`` (their tiny
  presets use the same LM config), tests with ``lm.load_or_train(config, tiny_lm_dir)``,
  which restores it."""
  from common import lm  # pylint: disable=import-outside-toplevel

  workdir = str(tmp_path_factory.mktemp("tiny_lm"))
  config = lm.get_config("tiny")
  with config.unlocked():
    config.train.progress_bar = False
  lm.load_or_train(config, workdir)
  return workdir


@pytest.fixture(scope="session")
def tiny_lm(tiny_lm_dir):
  """The trained tiny LM (`common.lm.TrainedLM`), restored from `tiny_lm_dir`."""
  from common import lm  # pylint: disable=import-outside-toplevel

  return lm.load_or_train(lm.get_config("tiny"), tiny_lm_dir)


@pytest.fixture(scope="session")
def tiny_hf_dir(tiny_lm, tmp_path_factory):
  """The trained tiny LM exported as a Hugging Face folder (config.json,
  model.safetensors) with a byte-level tokenizer.json whose end token is the newline
  (id 10): what `LocalTextModel.from_checkpoint` and `experiments.serve_lm` open."""
  from common.data import tokenizers  # pylint: disable=import-outside-toplevel
  from common.models import hf  # pylint: disable=import-outside-toplevel

  folder = str(tmp_path_factory.mktemp("tiny_hf"))
  hf.save_hf_checkpoint(folder, tiny_lm.params, tiny_lm.model.config)
  tokenizers.save_byte_tokenizer(folder, end_id=10)
  return folder


def _tensorboard_scalars(path):
  """Reads every scalar of a run directory with TensorBoard's own event reader.

  Returns (step, tag, value) tuples sorted by step then tag, after TensorBoard's
  handling of purge markers (a resumed run's events replace the older ones).
  """
  from tensorboard.backend.event_processing import event_accumulator
  accumulator = event_accumulator.EventAccumulator(
      os.fspath(path), size_guidance={event_accumulator.SCALARS: 0})
  accumulator.Reload()
  return sorted((event.step, tag, event.value)
                for tag in accumulator.Tags()["scalars"]
                for event in accumulator.Scalars(tag))


@pytest.fixture(scope="session")
def tensorboard_scalars():
  """The reader of the TensorBoard files the library writes (`_tensorboard_scalars`)."""
  return _tensorboard_scalars
