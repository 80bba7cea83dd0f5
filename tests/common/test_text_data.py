"""The standard-library corpus, its deterministic split, the batchers and tokenizers."""

import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from common.data import text
from common.data.tokenizers import ByteTokenizer


@pytest.fixture(scope="module")
def docs():
  return text.stdlib_documents()


def test_corpus_holds_english_and_code(docs):
  kinds = {d.name.split(":")[0] for d in docs}
  assert kinds == {"topic", "module"}
  assert sum(len(d.text) for d in docs) > 1_000_000
  assert any("def " in d.text for d in docs if d.name.startswith("module:"))


def test_split_is_deterministic_disjoint_and_order_free(docs):
  train, val = text.split_documents(docs, 0.1)
  names = lambda ds: [d.name for d in ds]
  assert set(names(train)).isdisjoint(names(val))
  assert len(train) + len(val) == len(docs)
  for kind in ("topic:", "module:"):
    assert any(n.startswith(kind) for n in names(val))
    assert any(n.startswith(kind) for n in names(train))
  shuffled = list(docs)
  random.Random(0).shuffle(shuffled)
  train2, val2 = text.split_documents(shuffled, 0.1)
  assert sorted(names(val2)) == sorted(names(val))
  a, b = text.stdlib_corpus(), text.stdlib_corpus()
  np.testing.assert_array_equal(a.validation, b.validation)
  np.testing.assert_array_equal(a.train, b.train)
  assert a.validation_names == b.validation_names
  with pytest.raises(ValueError, match="validation_fraction"):
    text.split_documents(docs, 1.5)


def test_window_batch_is_a_pure_function_of_seed_and_step():
  data = np.arange(1000, dtype=np.int32)
  a = text.window_batch(data, seed=3, step=7, batch_size=4, seq_len=16)["tokens"]
  b = text.window_batch(data, seed=3, step=7, batch_size=4, seq_len=16)["tokens"]
  c = text.window_batch(data, seed=3, step=8, batch_size=4, seq_len=16)["tokens"]
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)
  assert a.shape == (4, 17) and a.dtype == np.int32
  np.testing.assert_array_equal(np.diff(a, axis=1), 1)  # contiguous slices of `data`
  with pytest.raises(ValueError, match="too short"):
    text.window_batch(data[:10], 0, 0, 2, 16)


def test_eval_windows_cover_the_data_in_order():
  data = np.arange(101, dtype=np.int32)
  batches = list(text.eval_windows(data, seq_len=10, batch_size=2))
  flat = np.concatenate(batches)
  assert flat.shape == (10, 11)
  np.testing.assert_array_equal(flat[:, 0], np.arange(0, 100, 10))
  np.testing.assert_array_equal(flat[:, -1], np.arange(10, 101, 10))
  assert len(list(text.eval_windows(data, 10, 2, max_windows=5))) == 2


def test_unigram_baselines_against_brute_force():
  train = np.array([0, 0, 1, 2])
  assert text.unigram_entropy_bits(train, 4) == pytest.approx(1.5)
  counts = np.array([3, 2, 2, 1])  # add-one smoothed
  want = -np.mean(np.log2(counts[[0, 3]] / 8))
  assert text.unigram_cross_entropy_bits(train, np.array([0, 3]), 4) == pytest.approx(want)


@settings(max_examples=50, deadline=None)
@given(st.text())
def test_byte_tokenizer_round_trips(s):
  tok = ByteTokenizer()
  ids = tok.encode(s)
  assert all(0 <= i < 256 for i in ids)
  assert tok.decode(ids) == s
  np.testing.assert_array_equal(tok.encode_array(s), ids)


# ---------------------------------------------------------- issue 17: bad input
def test_decode_rejects_float_and_out_of_vocabulary_ids():
  tok = ByteTokenizer()
  with pytest.raises(TypeError, match="ids has dtype float64; expected integer"):
    tok.decode([104.7, 105.2])                      # was silently truncated to "hi"
  with pytest.raises(ValueError, match=r"ids\[1\]=256 is outside the vocabulary"):
    tok.decode([1, 256])
  assert tok.decode([]) == ""


def test_batchers_reject_bad_data_and_sizes():
  data = np.arange(200, dtype=np.int32) % 256
  with pytest.raises(TypeError, match="data has dtype float64; expected integer"):
    text.window_batch(data.astype(np.float64) + 0.5, 0, 0, 2, 8)
  with pytest.raises(ValueError, match=r"data has shape \(10, 20\); expected a 1-D"):
    text.window_batch(data.reshape(10, 20), 0, 0, 2, 8)
  with pytest.raises(ValueError, match="batch_size=0; expected an int >= 1"):
    text.window_batch(data, 0, 0, 0, 8)             # was an empty batch
  with pytest.raises(ValueError, match="seq_len=-1; expected an int >= 1"):
    text.window_batch(data, 0, 0, 2, -1)            # was windows of 0 tokens
  with pytest.raises(ValueError, match="seq_len=0; expected an int >= 1"):
    next(text.eval_windows(data, 0, 2))             # was ZeroDivisionError


def test_unigram_baselines_check_the_vocabulary():
  train = np.array([0, 1, 2, 3], np.int32)
  with pytest.raises(ValueError, match=r"evaluate\[1\]=300 is outside the vocabulary"):
    text.unigram_cross_entropy_bits(train, np.array([1, 300]))   # silently grew V
  with pytest.raises(ValueError, match="evaluate is empty"):
    text.unigram_cross_entropy_bits(train, np.array([], np.int32))  # was NaN
  with pytest.raises(ValueError, match="data is empty"):
    text.unigram_entropy_bits(np.array([], np.int32))                # was 0.0


def test_mechanism_inputs_are_checked():
  from common.data import mechanisms
  with pytest.raises(ValueError, match=r"probabilities \(nan, 0.05, 0.04\)"):
    mechanisms.mechanism_batch(0, 0, 1, 8, p_pair=float("nan"))     # was all-bigram data
  with pytest.raises(ValueError, match="per_mechanism=0; expected an int >= 1"):
    mechanisms.stratified_sample(np.array([0, 1, 1]), 0, seed=0)
  with pytest.raises(ValueError, match=r"labels has shape \(2, 3\)"):
    mechanisms.stratified_sample(np.zeros((2, 3), np.int32), 1, seed=0)
