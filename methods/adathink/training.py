"""AdaThink-Med's task wired to the LM stack: SFT batches, GRPO prompts and rewards, evaluation.

The generated cases (`data.py`) are encoded by a ``Codec`` (the shared LM's: bytes, with a
newline as the end token, so a response is ``<think>...</think><answer>d</answer>\\n``;
an HF checkpoint's: its tokenizer.json and end token):

* SFT (the warm-up that makes the model always think): right-padded rows
  [prompt ; sft_target ; eos], loss = mean next-token cross-entropy over the response
  and eos predictions only,

      L_SFT = -(1 / sum m) sum_{b,t} m_{b,t} log p(x_{b,t+1} | x_{b,<=t});

* GRPO: ``make_prompt_fn`` draws P cases per step (depth k uniform, then a case), left
  padded to one width; ``make_reward_fn`` decodes each rollout, scores accuracy and
  format with ``data.is_correct`` / ``is_well_formatted`` and calls a reward of
  ``reward.REWARDS`` with its running state, in the ``(rollout, cases, state) ->
  (rewards, state)`` form of ``common.rl.make_grpo_batch_fn(..., stateful_reward=True)``;
* evaluation: greedy decoding of every held-out case, with accuracy, response tokens and
  whether the think block is empty, per case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from common import checks
from common import llm
from common.data.tokenizers import ByteTokenizer
from common.models import logprobs
from common.models import sampling
from common.rl.rollout import Rollout
from methods.adathink import data
from methods.adathink import reward as reward_lib

class Codec(NamedTuple):
  """Text <-> token ids for one model.

  Attributes:
    tokenizer: anything with ``encode(text) -> ids`` and ``decode(ids) -> text``
      (``ByteTokenizer``, ``common.data.tokenizers.HFTokenizer``).
    eos_id: the end token that stops a response.
    pad_id: the padding id.
  """
  tokenizer: Any
  eos_id: int
  pad_id: int

  def encode(self, text: str) -> list[int]:
    return list(self.tokenizer.encode(text))


BYTES = Codec(ByteTokenizer(), eos_id=ord("\n"), pad_id=0)  # The shared byte-level LM's.


def prompt_width(cases: Sequence[Any], codec: Codec = BYTES) -> int:
  """The longest prompt in tokens: the static width every prompt batch is padded to."""
  return max(len(codec.encode(prompt_text(c))) for c in cases)


def sft_width(kb: data.KnowledgeBase, cases: Sequence[data.Case], codec: Codec = BYTES) -> int:
  """Tokens in the longest [prompt ; full-chain target ; eos] row."""
  return max(len(codec.encode(prompt_text(c) + data.sft_target(kb, c))) + 1 for c in cases)


MC_INSTRUCTION = ("Think step by step inside <think></think>, then give the option's letter "
                  "inside <answer></answer>.\n")


def prompt_text(case: Any) -> str:
  """A generated case's prompt; a multiple-choice question's text, options and the format
  instruction (``MC_INSTRUCTION``)."""
  return case.prompt if isinstance(case, data.Case) else data.medqa_prompt(case) + MC_INSTRUCTION


def case_depth(case: Any) -> int:
  """A generated case's chain depth k; 0 for a question without one (MedQA)."""
  return case.k if isinstance(case, data.Case) else 0


def _balanced_choice(cases: Sequence[Any], count: int, rng: np.random.Generator) -> list[Any]:
  """``count`` cases: a depth k uniform over the depths present, then a case of that k."""
  by_k: dict[int, list[Any]] = {}
  for c in cases:
    by_k.setdefault(case_depth(c), []).append(c)
  ks = sorted(by_k)
  out = []
  for k in rng.choice(ks, size=count):
    group = by_k[int(k)]
    out.append(group[int(rng.integers(len(group)))])
  return out


def sft_batch(task: data.Task, seed: int, step: int, batch_size: int, width: int,
              codec: Codec = BYTES, answer_only_fraction: float = 0.0
              ) -> dict[str, np.ndarray]:
  """SFT rows [prompt ; target ; eos], right-padded to ``width``, a pure function of
  (seed, step). The target is the full chain (``data.sft_target``), or, for a random
  fraction ``answer_only_fraction`` of rows, the answer-only response (an empty think
  block), which seeds the exploration GRPO needs to ever sample one.

  Returns:
    {"tokens": (B, width) int32, "mask": (B, width - 1) float32}; mask[b, t] = 1 iff
    tokens[b, t+1] is a response token or the eos.

  Example:
    >>> batch = sft_batch(task, 0, 0, 16, sft_width(task.kb, task.train))
  """
  rng = np.random.default_rng([seed, step, 0x5F7])
  tokens = np.full((batch_size, width), codec.pad_id, np.int32)
  mask = np.zeros((batch_size, width - 1), np.float32)
  checks.scalar("answer_only_fraction", answer_only_fraction, low=0.0, high=1.0, strict=False)
  cases = _balanced_choice(task.train, batch_size, rng)
  short = rng.random(batch_size) < answer_only_fraction
  for b, case in enumerate(cases):
    prompt = codec.encode(prompt_text(case))
    target = data.answer_only(case) if short[b] else data.sft_target(task.kb, case)
    response = codec.encode(target) + [codec.eos_id]
    row = prompt + response
    if len(row) > width:
      raise ValueError(f"an SFT row has {len(row)} tokens; width={width} is too short")
    tokens[b, :len(row)] = row
    mask[b, len(prompt) - 1:len(row) - 1] = 1.0
  return {"tokens": tokens, "mask": mask}


def sft_loss_fn(apply_fn: Callable[..., jax.Array]):
  """``loss_fn(params, batch, key)`` of the common loop: response-only cross-entropy.

  Args:
    apply_fn: ``(params, tokens) -> logits``.
  """
  def loss_fn(params, batch, key):
    del key
    logits = apply_fn(params, batch["tokens"])
    loss = logprobs.next_token_loss(logits, batch["tokens"], batch["mask"])
    return loss, {}
  return loss_fn


def make_prompt_fn(cases: Sequence[Any], prompts_per_step: int, width: int,
                   codec: Codec = BYTES
                   ) -> Callable[[int, int], tuple[jax.Array, jax.Array, list[Any]]]:
  """``prompt_fn(seed, step) -> (prompts (P, width), lengths (P,), cases)`` for GRPO.

  P cases per step, depth-balanced (``k`` uniform, then a case), a pure function of
  (seed, step); prompts left-padded with ``codec.pad_id``. Cases without a depth
  (``MCQuestion``) count as k = 0.
  """
  checks.positive_int("prompts_per_step", prompts_per_step)
  cases = list(cases)

  def prompt_fn(seed: int, step: int):
    chosen = _balanced_choice(cases, prompts_per_step,
                              np.random.default_rng([seed, step, 0x9A0]))
    tokens, lengths = sampling.pad_prompts([codec.encode(prompt_text(c)) for c in chosen],
                                           codec.pad_id, width)
    return tokens, lengths, chosen

  return prompt_fn


def decode_response(ids: Sequence[int], codec: Codec = BYTES) -> str:
  """A completion's text without its end token."""
  ids = [int(i) for i in ids]
  if ids and ids[-1] == codec.eos_id:
    ids = ids[:-1]
  return codec.tokenizer.decode(np.asarray(ids, np.int64))


def reward_inputs(r: Rollout, cases: Sequence[Any], group_size: int, codec: Codec = BYTES
                  ) -> reward_lib.RewardInputs:
  """``RewardInputs`` of a rollout: row i*G + g answers ``cases[i]``.

  Args:
    r: the ``Rollout`` (B*G rows).
    cases: the B cases (``data.Case`` or ``data.MCQuestion``).
    group_size: G.
  """
  texts = [decode_response(ids, codec) for ids in r.completions()]
  rows = [cases[b // group_size] for b in range(len(texts))]
  n = r.completion_mask.shape[1]
  return reward_lib.RewardInputs(
      correct=np.array([data.is_correct(t, c) for t, c in zip(texts, rows)], np.float32),
      format_ok=np.array([data.is_well_formatted(t) for t in texts], np.float32),
      mask=r.completion_mask.astype(jnp.float32), entropies=r.entropies[:, -n:],
      tokens=r.tokens[:, -n:])


def make_reward_fn(name: str, group_size: int, codec: Codec = BYTES, **hparams: Any
                   ) -> Callable[[Rollout, Sequence[Any], Any], tuple[jax.Array, Any]]:
  """``reward_fn(rollout, cases, state) -> (rewards (B*G,), state)`` with the reward
  ``reward.get_reward(name)`` and its hyperparameters (the stateful form of
  ``common.rl.make_grpo_batch_fn``). Every reward takes the ``LengthRewardState``; only
  AdaThink's changes it.

  Example:
    >>> reward_fn = make_reward_fn("adathink", 8, fixed_theta=0.5)
  """
  fn = reward_lib.get_reward(name)
  checks.positive_int("group_size", group_size, low=2)

  def reward_fn(r, cases, state):
    rewards, state, _ = fn(reward_inputs(r, cases, group_size, codec), state,
                           group_size=group_size, **hparams)
    return rewards, state

  return reward_fn


class Evaluation(NamedTuple):
  """Greedy responses to a list of cases, one entry per case.

  Attributes:
    k: chain depth.
    correct: the answer is right (and the response well formatted).
    formatted: the response is well formatted.
    tokens: response tokens, the end token included.
    think_chars: characters inside the think block (-1 when badly formatted).
    responses: the decoded responses.
  """
  k: np.ndarray
  correct: np.ndarray
  formatted: np.ndarray
  tokens: np.ndarray
  think_chars: np.ndarray
  responses: list[str]

  @property
  def empty_think(self) -> np.ndarray:
    return self.think_chars == 0


def evaluate(model, params, cases: Sequence[Any], *, max_new_tokens: int,
             batch_size: int, width: int, codec: Codec = BYTES) -> Evaluation:
  """Greedy responses to every case, in batches of ``batch_size`` (the last one padded
  with repeats, so one compilation serves all), scored per case.

  Example:
    >>> ev = evaluate(model, params, task.test, max_new_tokens=96, batch_size=64,
    ...               width=prompt_width(task.test))
    >>> ev.correct.mean(), ev.tokens.mean()
  """
  checks.positive_int("batch_size", batch_size)
  completions = llm.generate_in_batches(
      model, params, [codec.encode(prompt_text(c)) for c in cases], batch_size=batch_size,
      width=width, max_new_tokens=max_new_tokens, key=jax.random.PRNGKey(0),
      eos_id=codec.eos_id, pad_id=codec.pad_id)
  responses = [decode_response(ids, codec) for ids in completions]
  counts = [len(ids) for ids in completions]
  think = [data.think_length(t) for t in responses]
  return Evaluation(
      k=np.array([case_depth(c) for c in cases]),
      correct=np.array([data.is_correct(t, c) for t, c in zip(responses, cases)]),
      formatted=np.array([data.is_well_formatted(t) for t in responses]),
      tokens=np.array(counts), think_chars=np.array([-1 if t is None else t for t in think]),
      responses=responses)


def summarize(ev: Evaluation) -> dict[str, Any]:
  """Overall and per-depth accuracy, mean response tokens and empty-think fraction."""
  def stats(sel):
    return {"accuracy": float(ev.correct[sel].mean()), "tokens": float(ev.tokens[sel].mean()),
            "empty_think": float(ev.empty_think[sel].mean()),
            "formatted": float(ev.formatted[sel].mean()), "count": int(sel.sum())}
  return {"all": stats(np.ones_like(ev.correct, bool)),
          "by_k": {int(k): stats(ev.k == k) for k in np.unique(ev.k)}}
