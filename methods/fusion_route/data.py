"""Four text domains that Python ships or that we generate, and mixed documents of them.

- prose: the language-reference and library topics of `pydoc_data.topics`;
- code: the source of standard-library modules with their docstrings removed
  (`ast.unparse`, so comments go too);
- docs: the reST docstrings of the same modules, each under its qualified name;
- arith: generated column arithmetic with worked steps (addition, subtraction,
  multiplication by one digit).

Documents are split by name: the held-out modules give both the held-out code and the
held-out docs (`held_out_names`, by CRC-32 as `common.data.text`), so no evaluation
text was trained on. A mixed document interleaves segments of the four domains (whole
lines, `segment_bytes` long on average) in random order, so that no single domain's
expert covers it; every token carries the index of the domain it came from.
The coverage case (`rot13`) is prose under ROT13: a token class no expert saw.

Example:
    >>> d = make_domains(seed=0)
    >>> d.train["code"][:20], d.mixed_validation.tokens.shape
"""

from __future__ import annotations

import ast
import codecs
import importlib.util
import math
import zlib
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from common.data import text as text_lib
from common.data.tokenizers import ByteTokenizer

DOMAINS = ("prose", "code", "docs", "arith")
CODE_MODULES = (
    "abc", "argparse", "ast", "base64", "bisect", "calendar", "cmd", "codecs", "colorsys",
    "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "enum", "filecmp", "fnmatch", "fractions", "ftplib", "functools", "getopt",
    "gettext", "glob", "gzip", "hashlib", "heapq", "hmac", "imaplib", "inspect",
    "ipaddress", "json.decoder", "json.encoder", "locale", "logging.handlers", "mailbox",
    "netrc", "numbers", "operator", "optparse", "pathlib", "pickle", "pprint", "queue",
    "quopri", "random", "sched", "secrets", "selectors", "shlex", "shutil", "smtplib",
    "statistics", "string", "subprocess", "tabnanny", "tarfile", "tempfile", "textwrap",
    "threading", "timeit", "tokenize", "trace", "traceback", "turtle", "typing", "uuid",
    "wave", "weakref", "zipfile",
)


class Mixed(NamedTuple):
  """Token ids of mixed documents, the domain index (into DOMAINS) of each token, and
  the documents' UTF-8 length."""
  tokens: np.ndarray
  domains: np.ndarray
  num_bytes: int


class Domains(NamedTuple):
  """Token streams per domain and split, the mixed documents and the coverage case.

  Attributes:
    train, validation: domain name -> 1-D int32 token ids (documents joined by a
      blank line).
    mixed_train, mixed_validation: `Mixed` documents built from each split.
    rot13_train, rot13_validation: the prose streams under ROT13.
    bytes_per_token: UTF-8 bytes per token of each validation stream (the domains,
      "mixed", "rot13"; 1 for byte tokens), to turn bits per token into bits per byte.
  """
  train: dict
  validation: dict
  mixed_train: Mixed
  mixed_validation: Mixed
  rot13_train: np.ndarray
  rot13_validation: np.ndarray
  bytes_per_token: dict


def _module_source(module: str) -> str | None:
  spec = importlib.util.find_spec(module)
  if spec is None or not spec.origin or not spec.origin.endswith(".py"):
    return None
  with open(spec.origin, encoding="utf-8") as f:
    return f.read()


def _docstrings(tree: ast.Module, module: str) -> list[str]:
  """Each docstring as '<qualified name>\\n<cleaned docstring>'."""
  out = []

  def visit(node, prefix):
    doc = ast.get_docstring(node)
    if doc:
      out.append(f"{prefix}\n{doc}")
    for child in ast.iter_child_nodes(node):
      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        visit(child, f"{prefix}.{child.name}")

  visit(tree, module)
  return out


def _strip_docstrings(tree: ast.Module) -> ast.Module:
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      body = node.body
      if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
          and isinstance(body[0].value.value, str):
        node.body = body[1:] or [ast.Pass()]
  return tree


def code_and_docs(modules: tuple[str, ...] = CODE_MODULES) -> tuple[dict, dict]:
  """(module -> code without docstrings, module -> its docstrings joined); modules
  this Python lacks are skipped."""
  code, docs = {}, {}
  for module in modules:
    source = _module_source(module)
    if source is None:
      continue
    docs[module] = "\n\n".join(_docstrings(ast.parse(source), module))
    code[module] = ast.unparse(_strip_docstrings(ast.parse(source)))
  return code, docs


def arithmetic_problem(rng: np.random.Generator) -> str:
  """One column-arithmetic problem with its worked steps, e.g.

      add 347 589: 7+9=16 carry 1; 4+8+1=13 carry 1; 3+5+1=9; so 936.
  """
  kind = rng.integers(3)
  a, b = int(rng.integers(10, 10000)), int(rng.integers(10, 10000))
  if kind == 1 and a < b:
    a, b = b, a
  if kind == 2:
    b = int(rng.integers(2, 10))
  da, db = [int(c) for c in str(a)[::-1]], [int(c) for c in str(b)[::-1]]
  steps, carry = [], 0
  for i in range(max(len(da), len(db))):
    x, y = (da[i] if i < len(da) else 0), (db[i] if i < len(db) else 0)
    if kind == 0:
      v = x + y + carry
      expr = f"{x}+{y}" + (f"+{carry}" if carry else "") + f"={v}"
      carry = v // 10
    elif kind == 1:
      v = x - y - carry
      expr = f"{x}-{y}" + (f"-{carry}" if carry else "")
      carry = int(v < 0)
      expr += f"={v + 10 * carry}" + (" borrow 1" if carry else "")
      v = v + 10 * carry
    else:
      if i >= len(da):
        break
      v = x * b + carry
      expr = f"{x}*{b}" + (f"+{carry}" if carry else "") + f"={v}"
      carry = v // 10
    steps.append(expr + (f" carry {carry}" if kind != 1 and carry else ""))
  op, result = [("add", a + b), ("sub", a - b), ("mul", a * b)][kind]
  return f"{op} {a} {b}: " + "; ".join(steps) + f"; so {result}."


def arithmetic_documents(seed: int, count: int, problems_per_doc: int = 16) -> list[str]:
  rng = np.random.default_rng([seed, 0xA417])
  return ["\n".join(arithmetic_problem(rng) for _ in range(problems_per_doc))
          for _ in range(count)]


def held_out_names(names, fraction: float) -> set:
  """The ceil(fraction * n) names with the smallest CRC-32 (at least one kept for
  training), as `common.data.text.split_documents`."""
  names = sorted(names, key=lambda n: (zlib.crc32(n.encode()), n))
  return set(names[:min(len(names) - 1, math.ceil(fraction * len(names)))])


def domain_texts(seed: int, validation_fraction: float, arithmetic_docs: int
                 ) -> tuple[dict, dict]:
  """(train, validation): domain -> list of document texts."""
  from pydoc_data import topics
  code, docs = code_and_docs()
  held = held_out_names(list(code), validation_fraction)
  held_topics = held_out_names(list(topics.topics), validation_fraction)
  arith = arithmetic_documents(seed, arithmetic_docs)
  n_arith = max(1, math.ceil(validation_fraction * len(arith)))
  train = {"prose": [topics.topics[t] for t in sorted(topics.topics) if t not in held_topics],
           "code": [code[m] for m in code if m not in held],
           "docs": [docs[m] for m in docs if m not in held and docs[m]],
           "arith": arith[n_arith:]}
  validation = {"prose": [topics.topics[t] for t in sorted(held_topics)],
                "code": [code[m] for m in code if m in held],
                "docs": [docs[m] for m in docs if m in held and docs[m]],
                "arith": arith[:n_arith]}
  return train, validation


def _segments(text: str, rng: np.random.Generator, count: int, mean_bytes: int) -> list[str]:
  """`count` runs of whole lines from random places in `text`, about mean_bytes each."""
  lines = text.split("\n")
  out = []
  for _ in range(count):
    start, target, seg = int(rng.integers(len(lines))), int(rng.integers(mean_bytes // 2,
                                                                         3 * mean_bytes // 2)), []
    i = start
    while sum(len(s) + 1 for s in seg) < target and i < len(lines):
      seg.append(lines[i])
      i += 1
    out.append("\n".join(seg).strip("\n") or lines[start])
  return out


def mixed_documents(texts: dict, rng: np.random.Generator, num_segments: int,
                    mean_bytes: int, encode: Callable[[str], np.ndarray]) -> Mixed:
  """Segments of the domains in random order (never the same domain twice in a row),
  each followed by a newline; tokens and per-token domain indices."""
  joined = {d: "\n".join(texts[d]) for d in DOMAINS}
  order, last = [], -1
  for _ in range(num_segments):
    d = int(rng.choice([i for i in range(len(DOMAINS)) if i != last]))
    order.append(d)
    last = d
  tokens, labels, num_bytes = [], [], 0
  pools = {d: iter(_segments(joined[DOMAINS[d]], rng, order.count(d), mean_bytes))
           for d in set(order)}
  for d in order:
    segment = next(pools[d]) + "\n"
    ids = encode(segment)
    num_bytes += len(segment.encode())
    tokens.append(ids)
    labels.append(np.full(len(ids), d, np.int8))
  return Mixed(np.concatenate(tokens).astype(np.int32), np.concatenate(labels), num_bytes)


def byte_encode(text: str) -> np.ndarray:
  return ByteTokenizer().encode_array(text).astype(np.int32)


def make_domains(seed: int = 0, validation_fraction: float = 0.1, arithmetic_docs: int = 400,
                 mixed_segments: tuple[int, int] = (2000, 400), segment_bytes: int = 160,
                 encode: Callable[[str], np.ndarray] = byte_encode) -> Domains:
  """Every stream of the experiment (module docstring), deterministic in `seed`.

  Args:
    seed: seeds the arithmetic and the mixed documents.
    validation_fraction: share of topics, modules and arithmetic documents held out.
    arithmetic_docs: generated arithmetic documents (16 problems each).
    mixed_segments: (train, validation) segment counts of the mixed documents.
    segment_bytes: the mean length of a mixed segment.
    encode: text -> 1-D int token ids (bytes by default; an HF tokenizer's encode).
  """
  train_texts, val_texts = domain_texts(seed, validation_fraction, arithmetic_docs)
  sep = text_lib.DOCUMENT_SEPARATOR

  def stream(docs):
    return np.asarray(encode(sep.join(docs)), np.int32)

  train = {d: stream(train_texts[d]) for d in DOMAINS}
  validation = {d: stream(val_texts[d]) for d in DOMAINS}
  rng = np.random.default_rng([seed, 0x3143])
  mixed_train = mixed_documents(train_texts, rng, mixed_segments[0], segment_bytes, encode)
  mixed_val = mixed_documents(val_texts, rng, mixed_segments[1], segment_bytes, encode)
  rot13 = {s: [codecs.encode(t, "rot13") for t in texts["prose"]]
           for s, texts in (("train", train_texts), ("validation", val_texts))}
  rot = {s: stream(docs) for s, docs in rot13.items()}
  bpt = {d: len(sep.join(val_texts[d]).encode()) / max(len(validation[d]), 1) for d in DOMAINS}
  bpt["mixed"] = mixed_val.num_bytes / len(mixed_val.tokens)
  bpt["rot13"] = len(sep.join(rot13["validation"]).encode()) / max(len(rot["validation"]), 1)
  return Domains(train, validation, mixed_train, mixed_val, rot["train"], rot["validation"],
                 bpt)
