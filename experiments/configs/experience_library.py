"""Experience-library optimisation (TSGD) against zero-shot, append-only memory, static
retrieval and TSGD's ablations, all through the same solver and reflector roles.

Launch:
  python -m experiments.main --config=experiments/configs/experience_library.py:quick \
      --workdir=results/experience_library
  python -m experiments.main --config=experiments/configs/experience_library.py:paper \
      --workdir=/tmp/tsgd_paper --config.text_model=http://127.0.0.1:8000/v1 \
      --config.data.problems_path=/data/math/test.jsonl
  python -m experiments.main --config=experiments/configs/experience_library.py:paper \
      --workdir=/tmp/tsgd_paper --config.text_model=hf:/models/Qwen2.5-7B-Instruct \
      --config.data.problems_path=/data/math/test.jsonl

`text_model` picks the roles: "simulated" (the explicit solver and rule inducer of
`methods.experience_library.simulated`, with `config.simulated`), or one real LLM for
both roles: "http://HOST:PORT/v1" (any OpenAI-compatible server: ours,
`python -m experiments.serve_lm`, vLLM, llama.cpp, Ollama; an API key is read from
the environment variable `api_key_env`) or "hf:/path" (a local HF Qwen/Llama folder,
decoded in-process). `data.problems_path` replaces the generated hidden-rule task with
a MATH-style JSONL file (fields "problem" and "answer").

Every method runs `steps` steps on the same minibatches (`batch_size` problems, a fresh
`heldout_size` for TSGD's verification, an `audit_size` batch that measures each
accepted operation's held-out effect) and is evaluated on the test set every
`eval_every` steps.
"""

from common import config as config_lib

METHODS = ("zero_shot", "tsgd", "tsgd_no_verify", "tsgd_no_edit_delete", "append_only",
           "retrieval")

BASE = dict(
    method="experience_library",
    seed=0,
    num_seeds=3,             # seeds seed, seed+1, ...; the claims read the seed means
    text_model="simulated",
    api_key_env="OPENAI_API_KEY",
    # The generated hidden-rule task (methods/experience_library/problems.py), or a
    # MATH-style JSONL file split into train / validation / test pools.
    data=dict(num_families=30, zipf=1.0, test_size=300, problems_path="",
              test_fraction=0.3, validation_fraction=0.2),
    # Role budgets: the solver's context in characters (byte-level tokens), reply lengths.
    roles=dict(context_chars=8192, solver_max_tokens=64, reflector_max_tokens=256,
               request_timeout=120.0),
    # The simulated roles' stated model (docs/experience_library.md).
    simulated=dict(eps=0.01, slip=0.03, p_wrong=0.1, p_over=0.1, p_duplicate=0.05),
    capacity=20,
    initial_rules=(),
    steps=60,
    batch_size=16,
    heldout_size=32,
    audit_size=128,
    eval_every=5,
    retrieval_k=5,
    methods=METHODS,
    # Claim bars, fixed before running.
    min_gain=0.15,
    min_append_drop=0.05,
    hold_tolerance=0.02,      # about the noise of a mean of several 300-problem test scores
    min_harmful_fraction=0.2,
    max_size_ratio=0.25,
)

PRESETS = {
    # What `make reproduce` runs: at most 8 minutes on 2 cores (MINUTES["quick"]).
    "quick": {},
    # The largest fair test of each claim within 30 minutes on 2 cores (MINUTES["full"]):
    # the README's headline verdicts. 60 seeds (quick: 3; paired: the same task draws and roles for
    # every method), 900 test problems (quick: 300), the same 60 steps and bars: 26.1
    # minutes measured, pinned to one of the two cores while the other was busy.
    "full": {"num_seeds": 60, "data.test_size": 900},
    # A real LLM as both roles on MATH-style JSONL: set text_model and data.problems_path.
    "paper": {"text_model": "http://127.0.0.1:8000/v1", "num_seeds": 1, "capacity": 30, "steps": 100, "batch_size": 32,
              "heldout_size": 32, "audit_size": 64, "eval_every": 10,
              "roles": dict(context_chars=32768, solver_max_tokens=1024,
                            reflector_max_tokens=1024)},
    # Seconds: the claim test.
    "tiny": {"num_seeds": 1, "data": dict(num_families=12, test_size=150), "capacity": 8, "steps": 30,
             "heldout_size": 24, "audit_size": 64},
}


# Wall minutes of `python -m experiments.main` at each preset, measured on the 2-core
# machine (None: not measured yet). tests/experiments/test_contract.py checks quick <= 8
# and full <= 30.
MINUTES = {"quick": 0.9, "full": 26.1}


def get_config(preset: str | None = None):
  return config_lib.build("experience_library", BASE, PRESETS, preset)


def validate(config) -> None:
  """Raises ConfigError (one line) for any invalid value (the text model's reachability
  is checked by the experiment before the run starts)."""
  c = config_lib
  spec = config.text_model
  c.require(config, "text_model", isinstance(spec, str) and (
      spec == "simulated" or spec.startswith(("http://", "https://", "hf:"))),
            "'simulated', 'http://HOST:PORT/v1' or 'hf:/path/to/checkpoint'")
  c.positive_int(config, "capacity")   # K >= 1
  for key in ("num_seeds", "data.num_families", "data.test_size", "roles.context_chars",
              "roles.solver_max_tokens", "roles.reflector_max_tokens", "steps", "batch_size",
              "heldout_size", "audit_size", "eval_every", "retrieval_k"):
    c.positive_int(config, key)
  c.positive(config, "roles.request_timeout")
  c.positive(config, "data.zipf")
  c.in_interval(config, "data.test_fraction", 0.0, 1.0)
  c.in_interval(config, "data.validation_fraction", 0.0, 1.0)
  c.require(config, "data.problems_path", isinstance(config.data.problems_path, str),
            "a path to a JSONL file, or '' for the generated task")
  for key in ("simulated.eps", "simulated.slip"):
    c.in_interval(config, key, 0.0, 1.0, closed="low")
  for key in ("simulated.p_wrong", "simulated.p_over", "simulated.p_duplicate"):
    c.in_interval(config, key, 0.0, 1.0, closed="both")
  c.subset_of(config, "methods", METHODS)
  c.require(config, "methods", "tsgd" in config.methods and "zero_shot" in config.methods,
            "a subset of the methods that includes 'tsgd' and 'zero_shot'")
  rules = config.initial_rules
  c.require(config, "initial_rules", not isinstance(rules, str) and all(
      isinstance(r, str) and r.strip() for r in rules) and len(rules) <= config.capacity,
            f"a sequence of at most capacity={config.capacity} non-empty strings")
  for key in ("min_gain", "min_append_drop", "hold_tolerance", "min_harmful_fraction",
              "max_size_ratio"):
    c.in_interval(config, key, 0.0, 1.0, closed="both")


def text_model_kwargs(config) -> dict:
  """Constructor arguments for `common.llm.text_model_from_spec(config.text_model, ...)`."""
  from common import llm  # Lazy: configs load without jax. pylint: disable=import-outside-toplevel
  return llm.spec_kwargs(config.text_model, timeout=config.roles.request_timeout,
                         api_key_env=config.api_key_env)


def preflight(config) -> None:
  """The checks that need I/O or the method's code, before any work: every initial rule
  fits the solver's context, the text model answers (an HTTP URL serves a model; an
  "hf:" folder exists) and the problem file reads. Raises a one-line ConfigError."""
  from common import llm  # Lazy: configs load without jax. pylint: disable=import-outside-toplevel
  from methods.experience_library import library, problems, roles  # pylint: disable=import-outside-toplevel

  longest = roles.max_rule_chars(config.roles.context_chars, config.roles.solver_max_tokens)
  for i, rule in enumerate(config.initial_rules):
    try:
      library.check_rule(rule, max(longest, 0), f"initial_rules[{i}]")
    except ValueError as e:
      raise config_lib.ConfigError(f"config.{e}") from None

  if config.text_model != "simulated":
    try:
      llm.check_spec(config.text_model, **text_model_kwargs(config))
    except ValueError as e:
      config_lib.fail("text_model", config.text_model, f"a usable text model ({e})")
  if config.data.problems_path:
    try:
      problems.load_problems_jsonl(config.data.problems_path)
    except (OSError, ValueError) as e:
      raise config_lib.ConfigError(f"config.data.problems_path: {e}") from None
