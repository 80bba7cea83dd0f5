"""Tests of common/llm: the protocol, chat formatting, stop strings and the local backend
(ragged batches decode exactly as each prompt alone; one-line errors before any work)."""

import jax
import numpy as np
import pytest

from common import llm
from common.data.tokenizers import ByteTokenizer
from common.models import sampling

TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def local(tiny_lm):
  return llm.LocalTextModel(tiny_lm.model, tiny_lm.params, TOK, eos_id=10, batch_size=4,
                            bucket=8)


def _alone(tiny_lm, prompt, n):
  """Greedy continuation of one unpadded prompt, cut after the first newline (eos)."""
  ids = np.asarray([TOK.encode(prompt)], np.int32)
  out = sampling.generate(tiny_lm.model, tiny_lm.params, ids, jax.random.PRNGKey(0),
                          max_new_tokens=n, temperature=0.0)
  text = TOK.decode(np.asarray(out[0, ids.shape[1]:]))
  return text.split("\n")[0]


def test_batched_ragged_greedy_equals_each_prompt_alone(local, tiny_lm):
  prompts = ["The ", "def f(x):", "import o", "a", "Hello, wor", "class "]
  assert isinstance(local, llm.TextModel)
  got = local.complete(prompts, max_tokens=12)       # two chunks of 4, the last padded
  assert got == [_alone(tiny_lm, p, 12) for p in prompts]
  assert local.complete(prompts, max_tokens=12) == got  # greedy: same every call


def test_stop_strings_cut_before_the_earliest_match(local):
  full = local.complete(["The "], max_tokens=16)[0]
  assert len(full) >= 2
  stop = full[1]
  assert local.complete(["The "], max_tokens=16, stop=(stop, "\x00"))[0] == full[:full.index(stop)]
  assert llm.apply_stop("a.b\nc", ("\n", ".")) == "a"
  assert llm.apply_stop("abc", ("x",)) == "abc"


def _utf8(ids):
  return bytes(ids).decode("utf-8", "replace")


@pytest.mark.parametrize("ids, stop, expected", [
    # The end token ends it and is counted; the text is what came before it.
    ([104, 105, 10], (), llm.Completion("hi", 3, "stop")),
    # No end token: every id is counted and the budget ended it.
    ([104, 105, 33], (), llm.Completion("hi!", 3, "length")),
    # The stop string "i!" completes at the third id: three are counted, not five.
    ([104, 105, 33, 120, 121], ("i!",), llm.Completion("h", 3, "stop")),
    # Two bytes of one character, then the end token: a re-encoding of the text would
    # count 2 + 0 (not the end token); the ids are 3.
    ([0xC3, 0xA9, 10], (), llm.Completion("\u00e9", 3, "stop")),
    # A lone continuation byte decodes to U+FFFD, whose re-encoding is 3 bytes; 1 id.
    ([0xA9], (), llm.Completion("\ufffd", 1, "length")),
])
def test_completion_counts_the_generated_ids(ids, stop, expected):
  assert llm.local.completion_of(ids, _utf8, eos_id=10, stop=stop) == expected


def test_generate_reports_what_complete_returns_with_its_counts(local):
  prompts = ["The ", "def f(x):", "a"]
  got = local.generate(prompts, max_tokens=12, stop=("e",))
  assert [c.text for c in got] == local.complete(prompts, max_tokens=12, stop=("e",))
  for c in got:
    assert 1 <= c.tokens <= 12 and c.finish_reason in ("stop", "length")
    assert c.finish_reason == "stop" or c.tokens == 12


def test_sampling_differs_between_calls_and_is_seeded(tiny_lm):
  a = llm.LocalTextModel(tiny_lm.model, tiny_lm.params, TOK, seed=3, batch_size=2)
  b = llm.LocalTextModel(tiny_lm.model, tiny_lm.params, TOK, seed=3, batch_size=2)
  first = a.complete(["The ", "The "], max_tokens=10, temperature=1.0)
  assert first == b.complete(["The ", "The "], max_tokens=10, temperature=1.0)
  assert first != a.complete(["The ", "The "], max_tokens=10, temperature=1.0)


def test_chat_formatting():
  messages = [("system", "Be brief."), llm.ChatMessage("user", "2 + 2?")]
  assert llm.format_chat(messages) == "System: Be brief.\nUser: 2 + 2?\nAssistant:"
  assert llm.format_chat(messages, "chatml") == (
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2 + 2?<|im_end|>\n"
      "<|im_start|>assistant\n")


@pytest.mark.parametrize("call, error, match", [
    (lambda m: m.complete("The ", max_tokens=4), ValueError, "got one str"),
    (lambda m: m.complete(["The "], max_tokens=0), ValueError, "max_tokens must be an int >= 1"),
    (lambda m: m.complete(["The "], max_tokens=4, temperature=-1), ValueError,
     "temperature must be a finite number >= 0"),
    (lambda m: m.complete(["The "], max_tokens=4, stop="\n"), ValueError, "stop must be"),
    (lambda m: m.complete([""], max_tokens=4), ValueError, r"prompts\[0\] encodes to no tokens"),
    (lambda m: m.complete(["ok", "x" * 2000], max_tokens=4), ValueError,
     r"prompts\[1\] has 2000 tokens; with max_tokens=4 that exceeds the model's context"),
    (lambda m: llm.format_chat([("robot", "hi")]), ValueError, r"messages\[0\] must be"),
    (lambda m: llm.format_chat([("user", "hi")], "alpaca"), ValueError, "unknown chat template"),
])
def test_bad_requests_are_one_line_errors(local, call, error, match):
  with pytest.raises(error, match=match):
    call(local)
