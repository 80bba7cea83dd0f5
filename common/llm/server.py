"""Our OpenAI-compatible server as a library: the FastAPI app, its batching decode
worker, and helpers that launch it and wait until it answers.

`make_app(text_model, ...)` builds the app around any `TextModel` (a `LocalTextModel`,
a simulated role, ...):

  GET  /health               {"status": "ok", "busy": ..., "queued": ..., counters}
  GET  /v1/models            the served model, with its context as max_model_len
  POST /v1/completions       prompt (str or list), max_tokens, temperature, stop, n=1
  POST /v1/chat/completions  messages -> the chat template -> one prompt (the
                             checkpoint's own jinja2 template when it carries one)

Responses have OpenAI's shape (id, object, created, model, choices, usage: prompt tokens
by the model's tokenizer, completion tokens as the ids generated, the end token
included). Every error has OpenAI's body {"error": {"message", "type", "param",
"code"}}: a malformed body is a 422; a bad request (a prompt plus max_tokens longer than
the context, n > 1, stream, or a field that would change the output and that we do not
implement: echo, logprobs, best_of, suffix, top_p != 1, ...) a 400 naming it; an unknown
path a 404, a wrong method a 405; with `api_key`, a request without the key a 401; a
request the server cannot finish because it is shutting down a 503; a failure inside
the server a 500 that names no internals (the exception goes to the "serve_lm" log).
One decode worker (`Batcher`) runs the text model in a thread, so the event loop (and /health) keeps answering while it decodes; requests that
share (max_tokens, temperature, stop) and arrive while it is busy, or within
`batch_wait_s` of each other, are decoded together in one batched call of at most
`batch_size` prompts.

`serving_app` serves an app from a thread of this process; `start_subprocess` /
`serving` launch the command-line entrypoint, `python -m experiments.serve_lm` (a
subprocess: nothing here imports experiments/), on a free loopback port and wait until
/health answers (the tests and the benchmark do). fastapi and pydantic load with this
module and uvicorn only when a server starts, so `import common.llm` does not pull them:
import this module as `from common.llm import server`. See docs/llm.md.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import hmac
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

import fastapi
from fastapi import exceptions as fastapi_exceptions
from fastapi import responses
import pydantic
from starlette import exceptions as starlette_exceptions

from common.llm import base

# `start_subprocess` runs `python -m ENTRYPOINT` (the command line) in REPO, the repo root.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENTRYPOINT = "experiments.serve_lm"
LOG = logging.getLogger("serve_lm")


# ----------------------------------------------------------------------- request bodies


class _Body(pydantic.BaseModel):
  """Fields both endpoints share. Other OpenAI fields are checked by `_check_extra`: a
  400 names any that would change the output, never silently ignored."""
  model_config = pydantic.ConfigDict(extra="allow")
  model: str | None = None
  temperature: float = pydantic.Field(1.0, ge=0.0, allow_inf_nan=False)
  stop: str | list[str] | None = None
  n: int = 1
  stream: bool = False


class CompletionBody(_Body):
  prompt: str | list[str]
  max_tokens: int = pydantic.Field(16, ge=1)


class Message(pydantic.BaseModel):
  role: str
  content: str


class ChatBody(_Body):
  messages: list[Message]
  max_tokens: int | None = pydantic.Field(None, ge=1)
  max_completion_tokens: int | None = pydantic.Field(None, ge=1)


# OpenAI fields that do not change the output, and those accepted only at the value that
# leaves it unchanged (any other value, and any other field, is a 400 naming it).
HARMLESS_FIELDS = frozenset({"user", "metadata", "store", "service_tier", "stream_options"})
NEUTRAL_VALUES = {"echo": (None, False), "logprobs": (None, False), "top_logprobs": (None, 0),
                  "best_of": (None, 1), "suffix": (None, ""), "top_p": (None, 1),
                  "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
                  "logit_bias": (None, {}), "tools": (None, []), "functions": (None, []),
                  "tool_choice": (None, "none", "auto"), "seed": (None,),
                  "response_format": (None, {"type": "text"})}


def _same(value: Any, neutral: Any) -> bool:
  """`value` is `neutral` (True is not 1, 1.0 is 1)."""
  if neutral is None or isinstance(neutral, bool):
    return value is neutral
  if isinstance(neutral, (int, float)):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == neutral
  return value == neutral


def _check_extra(body: "_Body") -> None:
  """A one-line ValueError (a 400) for the first field this server cannot honour (a seed
  is honoured at temperature 0, where it changes nothing)."""
  for name, value in (body.model_extra or {}).items():
    if name in HARMLESS_FIELDS or (name == "seed" and body.temperature == 0):
      continue
    if name not in NEUTRAL_VALUES:
      raise ValueError(f"{name} is not supported by this server; send only the fields "
                       "that docs/llm.md lists")
    if not any(_same(value, v) for v in NEUTRAL_VALUES[name]):
      others = [repr(v) for v in NEUTRAL_VALUES[name] if v is not None]
      raise ValueError(f"{name}={value!r} is not supported by this server; omit it"
                       + (f" or send {' or '.join(others)}" if others else ""))


# ----------------------------------------------------------------------------- batching


MAX_WAIT_STEPS = 10    # a batch waits at most this many batch_wait windows for company


class ServerClosing(RuntimeError):
  """A job the worker will not decode: the server is shutting down (a 503)."""


class _Job(NamedTuple):
  key: tuple            # (max_tokens, temperature, stop): what one `complete` call shares
  prompts: list[str]
  future: asyncio.Future


class Batcher:
  """One decode worker that batches jobs with the same (max_tokens, temperature, stop).

  The worker takes the oldest job and adds every queued job with the same key while the
  batch holds at most `batch_size` prompts (others wait for the next round, oldest
  first). Until the batch is full it then waits in windows of `max_wait_s` as long as
  each window brings another such job (at most `MAX_WAIT_STEPS` windows), and runs one
  `text_model.complete` call in its own thread. If a batched call fails, each job is
  retried alone, so a bad request fails only itself.
  """

  def __init__(self, text_model: base.TextModel, batch_size: int, max_wait_s: float):
    self.text_model, self.batch_size, self.max_wait_s = text_model, batch_size, max_wait_s
    self.busy, self.counts = False, {"requests": 0, "complete_calls": 0, "prompts": 0}
    self._queue: asyncio.Queue | None = None
    self._held: collections.deque = collections.deque()
    self._executor: concurrent.futures.ThreadPoolExecutor | None = None
    self._task: asyncio.Task | None = None
    self._decoding: list[_Job] = []

  def start(self) -> None:
    """Starts the worker on the running event loop (the app's lifespan calls it)."""
    self._queue, self._held = asyncio.Queue(), collections.deque()
    self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="decode")
    self._task = asyncio.get_running_loop().create_task(self._run())

  def status(self) -> dict:
    """Whether it is decoding, the jobs waiting, and counters since the start."""
    queued = len(self._held) + (self._queue.qsize() if self._queue is not None else 0)
    return {"busy": self.busy, "queued": queued, **self.counts}

  async def stop(self) -> None:
    """Stops the worker; every job not yet answered fails with `ServerClosing`."""
    pending = list(self._decoding) + list(self._held)
    while self._queue is not None and not self._queue.empty():
      pending.append(self._queue.get_nowait())
    if self._task is not None:
      self._task.cancel()
      with contextlib.suppress(asyncio.CancelledError):
        await self._task
    for job in pending:
      if not job.future.done():
        job.future.set_exception(ServerClosing("the server is shutting down; retry the "
                                               "request when it is back"))
    self._executor.shutdown(wait=False, cancel_futures=True)

  async def submit(self, prompts: list[str], key: tuple) -> list[base.Completion]:
    """The completions of `prompts`, decoded with whatever shares the key."""
    future = asyncio.get_running_loop().create_future()
    self.counts["requests"] += 1
    await self._queue.put(_Job(key, prompts, future))
    return await future

  def _take(self, batch: list[_Job], size: int) -> tuple[int, int]:
    """Moves held and queued jobs with the batch's key into it, while they fit:
    (prompts in the batch, jobs added)."""
    pending = list(self._held)
    while not self._queue.empty():
      pending.append(self._queue.get_nowait())
    self._held.clear()
    added = 0
    for job in pending:
      if job.key == batch[0].key and size + len(job.prompts) <= self.batch_size:
        batch.append(job)
        size, added = size + len(job.prompts), added + 1
      else:
        self._held.append(job)
    return size, added

  async def _run(self) -> None:
    while True:
      batch = [self._held.popleft() if self._held else await self._queue.get()]
      size, _ = self._take(batch, len(batch[0].prompts))
      for _ in range(MAX_WAIT_STEPS if self.max_wait_s > 0 else 0):
        if size >= self.batch_size:
          break
        await asyncio.sleep(self.max_wait_s)
        size, added = self._take(batch, size)
        if not added:
          break
      await self._decode(batch)

  async def _decode(self, batch: list[_Job]) -> None:
    batch = [job for job in batch if not job.future.done()]   # skip clients that left
    if not batch:
      return
    prompts = [p for job in batch for p in job.prompts]
    max_tokens, temperature, stop = batch[0].key
    call = functools.partial(base.generate, self.text_model, prompts, max_tokens=max_tokens,
                             temperature=temperature, stop=stop)
    self.busy, self._decoding = True, batch
    self.counts["complete_calls"] += 1
    self.counts["prompts"] += len(prompts)
    try:
      texts = await asyncio.get_running_loop().run_in_executor(self._executor, call)
    except Exception as e:  # pylint: disable=broad-except
      if len(batch) > 1:
        for job in batch:
          await self._decode([job])
      elif not batch[0].future.done():
        batch[0].future.set_exception(e)
      return
    finally:
      self.busy, self._decoding = False, []
    for job in batch:
      if not job.future.done():     # a client that went away leaves a cancelled future
        job.future.set_result(texts[:len(job.prompts)])
      texts = texts[len(job.prompts):]


# ------------------------------------------------------------------------------- the app


def _error(status: int, message: str, kind: str = "invalid_request_error",
           code: str | None = None):
  return responses.JSONResponse(status_code=status, content={"error": {
      "message": " ".join(str(message).split()), "type": kind, "param": None, "code": code}})


class _Server(NamedTuple):
  """What the endpoints need."""
  batcher: Batcher
  model_name: str
  context: int | None
  tokenizer: Any
  chat_template: Any            # a name of base.CHAT_TEMPLATES or a ChatTemplate
  max_tokens_limit: int | None


def _count(server: _Server, text: str) -> int:
  """Tokens of `text` by the model's tokenizer (UTF-8 bytes without one)."""
  if server.tokenizer is None:
    return len(text.encode("utf-8"))
  return len(server.tokenizer.encode(text))


def _check(server: _Server, prompts: list[str], max_tokens: int, body: _Body) -> list[int]:
  """The prompts' token counts; a one-line ValueError (a 400) for anything we refuse."""
  _check_extra(body)
  if body.n != 1:
    raise ValueError(f"n={body.n} is not supported; this server returns one choice per "
                     "prompt (n=1)")
  if body.stream:
    raise ValueError("stream=true is not supported; send stream=false")
  stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or ())
  base.check_request(prompts, max_tokens, body.temperature, stop)
  if not prompts:
    raise ValueError("prompt is an empty list; expected at least one prompt")
  if server.max_tokens_limit is not None and max_tokens > server.max_tokens_limit:
    raise ValueError(f"max_tokens={max_tokens} exceeds this server's limit of "
                     f"{server.max_tokens_limit}")
  counts = [_count(server, p) for p in prompts]
  for i, n in enumerate(counts):
    if n == 0:
      raise ValueError(f"prompt[{i}] encodes to no tokens; expected a non-empty prompt")
    if server.context is not None and n + max_tokens > server.context:
      raise ValueError(f"prompt[{i}] has {n} tokens; with max_tokens={max_tokens} that "
                       f"exceeds the model's context of {server.context} tokens")
  return counts


async def _generate(server: _Server, prompts: list[str], max_tokens: int, body: _Body):
  """(texts, finish reasons, usage) of one request."""
  counts = _check(server, prompts, max_tokens, body)
  stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
  done = await server.batcher.submit(prompts, (max_tokens, float(body.temperature), stop))
  texts = [c.text for c in done]
  # The backend's own count of generated ids; a re-encoding where it has none.
  lengths = [_count(server, c.text) if c.tokens is None else c.tokens for c in done]
  reasons = [c.finish_reason or ("length" if n >= max_tokens else "stop")
             for c, n in zip(done, lengths)]
  usage = {"prompt_tokens": sum(counts), "completion_tokens": sum(lengths),
           "total_tokens": sum(counts) + sum(lengths)}
  return texts, reasons, usage


def _envelope(server: _Server, kind: str, choices: list[dict], usage: dict) -> dict:
  prefix = "chatcmpl" if kind == "chat.completion" else "cmpl"
  return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()),
          "model": server.model_name, "choices": choices, "usage": usage}


def _validation_error(request, error: fastapi_exceptions.RequestValidationError):
  del request
  message = "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}"
                      for e in error.errors())
  return _error(422, f"invalid request body: {message}")


def _http_error(request, error: starlette_exceptions.HTTPException):
  """404 and 405 (and any other HTTPException) in OpenAI's error body."""
  if error.status_code == 404:
    message = f"Invalid URL ({request.method} {request.url.path})"
  elif error.status_code == 405:
    message = f"Method {request.method} is not allowed for {request.url.path}"
  else:
    message = str(error.detail)
  return _error(error.status_code, message)


def _server_error(request, error: Exception):
  """A 500 that names no internals; the exception goes to the log."""
  LOG.error("%s %s failed", request.method, request.url.path, exc_info=error)
  return _error(500, "the server had an error while processing the request; its log has "
                "the details", kind="server_error")


def _closing_error():
  return _error(503, "the server is shutting down; retry the request when it is back",
                kind="server_error")


class _Guard:
  """ASGI middleware around the app: with an API key, a 401 for a request (but /health)
  without "Authorization: Bearer <key>"; and a 503 in place of no answer for a request
  that uvicorn cancels at shutdown (after its graceful-shutdown timeout)."""

  def __init__(self, app, api_key: str | None):
    self.app, self.api_key = app, api_key

  def _authorized(self, scope) -> bool:
    if self.api_key is None or scope["path"] == "/health":
      return True
    sent = dict(scope["headers"]).get(b"authorization", b"")
    return hmac.compare_digest(sent, f"Bearer {self.api_key}".encode())

  async def __call__(self, scope, receive, send):
    if scope["type"] != "http":
      return await self.app(scope, receive, send)
    if not self._authorized(scope):
      return await _error(401, "missing or wrong API key: send the header 'Authorization: "
                          "Bearer <key>'", code="invalid_api_key")(scope, receive, send)
    started = False

    async def send_tracked(message):
      nonlocal started
      started = started or message["type"] == "http.response.start"
      await send(message)

    try:
      await self.app(scope, receive, send_tracked)
    except asyncio.CancelledError:
      if started:
        raise
      await _closing_error()(scope, receive, send)


def _routes(api: fastapi.FastAPI, server: _Server) -> None:
  """Registers the four endpoints."""

  @api.get("/health")
  async def health():
    return {"status": "ok", "model": server.model_name, **server.batcher.status()}

  @api.get("/v1/models")
  async def models():
    return {"object": "list", "data": [{
        "id": server.model_name, "object": "model", "created": 0, "owned_by": "icml26",
        "max_model_len": server.context}]}

  @api.post("/v1/completions")
  async def completions(body: CompletionBody):
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    try:
      texts, reasons, usage = await _generate(server, prompts, body.max_tokens, body)
    except ValueError as e:
      return _error(400, e)
    except ServerClosing:
      return _closing_error()
    choices = [{"index": i, "text": t, "logprobs": None, "finish_reason": r}
               for i, (t, r) in enumerate(zip(texts, reasons))]
    return _envelope(server, "text_completion", choices, usage)

  @api.post("/v1/chat/completions")
  async def chat_completions(body: ChatBody):
    try:
      prompt = base.format_chat([(m.role, m.content) for m in body.messages],
                                server.chat_template)
      max_tokens = body.max_tokens or body.max_completion_tokens or _room(server, prompt)
      texts, reasons, usage = await _generate(server, [prompt], max_tokens, body)
    except ValueError as e:
      return _error(400, e)
    except ServerClosing:
      return _closing_error()
    choices = [{"index": 0, "message": {"role": "assistant", "content": texts[0]},
                "finish_reason": reasons[0]}]
    return _envelope(server, "chat.completion", choices, usage)


def _room(server: _Server, prompt: str) -> int:
  """A chat request's default max_tokens: what the context leaves (as vLLM), capped by
  the server's limit; 16 when the model reports no context."""
  room = 16 if server.context is None else server.context - _count(server, prompt)
  if server.max_tokens_limit is not None:
    room = min(room, server.max_tokens_limit)
  if room < 1:
    raise ValueError(f"the prompt fills the model's context of {server.context} tokens")
  return room


def make_app(text_model: base.TextModel, *, model_name: str, context: int | None = None,
             tokenizer: Any = None, chat_template: Any = None, batch_size: int = 16,
             batch_wait_s: float = 0.002, max_tokens_limit: int | None = None,
             api_key: str | None = None) -> fastapi.FastAPI:
  """The OpenAI-compatible FastAPI app around `text_model`.

  Args:
    text_model: any `TextModel` (a `LocalTextModel`, a simulated role, ...).
    model_name: the name `/v1/models` lists and responses echo.
    context: prompt + max_tokens limit checked before decoding (default:
      `text_model.context` if it has one, else unchecked).
    tokenizer: counts tokens for the context check and `usage` (default:
      `text_model.tokenizer` if it has one, else UTF-8 bytes).
    chat_template: "plain", "chatml" or a `ChatTemplate` (`common.llm.format_chat`);
      None (default): the checkpoint's own template when its tokenizer carries one
      (`base.chat_template_of`), else "plain".
    batch_size: prompts per batched `complete` call.
    batch_wait_s: how long an idle worker waits for requests to batch with the first.
    max_tokens_limit: largest max_tokens a request may ask (None: the context).
    api_key: when set, every request but /health needs "Authorization: Bearer <key>"
      (else a 401).

  Returns:
    The app; serve it with uvicorn (`python -m experiments.serve_lm`, or `serving_app`).

  Example:
    >>> lm = LocalTextModel.from_checkpoint("/models/Qwen3-0.6B")
    >>> api = make_app(lm, model_name="qwen3", chat_template="chatml")
    >>> uvicorn.run(api, host="127.0.0.1", port=8000)
  """
  if chat_template is None:
    chat_template = base.chat_template_of(text_model)
  if not hasattr(chat_template, "render") and chat_template not in base.CHAT_TEMPLATES:
    raise ValueError(f"unknown chat template {chat_template!r}; expected one of "
                     f"{sorted(base.CHAT_TEMPLATES)} or a checkpoint's ChatTemplate")
  if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
    raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
  if api_key is not None and (not isinstance(api_key, str) or not api_key):
    raise ValueError("api_key must be a non-empty string or None")
  if context is None:
    context = getattr(text_model, "context", None)
  batcher = Batcher(text_model, batch_size, batch_wait_s)
  server = _Server(batcher, model_name, context,
                   tokenizer if tokenizer is not None else getattr(text_model, "tokenizer", None),
                   chat_template, max_tokens_limit or None)

  @contextlib.asynccontextmanager
  async def lifespan(_):
    batcher.start()
    yield
    await batcher.stop()

  api = fastapi.FastAPI(title=f"serve_lm: {model_name}", lifespan=lifespan)
  api.add_exception_handler(fastapi_exceptions.RequestValidationError, _validation_error)
  api.add_exception_handler(starlette_exceptions.HTTPException, _http_error)
  api.add_exception_handler(Exception, _server_error)
  api.add_middleware(_Guard, api_key=api_key)

  _routes(api, server)
  return api


# ------------------------------------------------------------- launching and waiting


def free_port(host: str = "127.0.0.1") -> int:
  """A TCP port that nothing listens on now (the OS picks it)."""
  with socket.socket() as s:
    s.bind((host, 0))
    return s.getsockname()[1]


def wait_until_healthy(base_url: str, timeout_s: float = 120.0,
                       process: subprocess.Popen | None = None, log: str = "") -> None:
  """Polls `{root}/health` until it answers 200; a one-line RuntimeError if `process`
  exits first or `timeout_s` passes."""
  import httpx  # pylint: disable=import-outside-toplevel

  root = base_url.rstrip("/").removesuffix("/v1")
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if process is not None and process.poll() is not None:
      raise RuntimeError(f"serve_lm exited with status {process.returncode} before answering"
                         f": {_last_line(log)}")
    with contextlib.suppress(httpx.HTTPError):
      if httpx.get(f"{root}/health", timeout=2.0).status_code == 200:
        return
    time.sleep(0.1)
  raise RuntimeError(f"{root}/health did not answer within {timeout_s:g} s: {_last_line(log)}")


def _last_line(path: str) -> str:
  if not path or not os.path.exists(path):
    return "(no log)"
  with open(path, errors="replace") as f:
    lines = [line.strip() for line in f if line.strip()]
  return lines[-1] if lines else "(empty log)"


def start_subprocess(checkpoint: str, *, host: str = "127.0.0.1", port: int | None = None,
                     timeout_s: float = 120.0, log_path: str | None = None,
                     **flag_values: Any) -> tuple[subprocess.Popen, str]:
  """Launches `python -m experiments.serve_lm` and waits until /health answers.

  Args:
    checkpoint: the Hugging Face folder to serve.
    host, port: where it listens (default: a free loopback port).
    timeout_s: how long to wait for /health (startup includes loading the weights).
    log_path: where its stdout and stderr go (default: a temporary file).
    **flag_values: further flags, e.g. `batch_size=8`, `chat_template="chatml"`.

  Returns:
    (the process, its base URL "http://HOST:PORT/v1"); the caller stops the process
    (`serving` does it for you).

  Example:
    >>> proc, url = start_subprocess("/tmp/tiny_hf", batch_size=8)
    >>> HTTPTextModel(url).complete(["The "], max_tokens=8)
    >>> proc.terminate()
  """
  port = port or free_port(host)
  if log_path is None:
    fd, log_path = tempfile.mkstemp(prefix="serve_lm_", suffix=".log")
    os.close(fd)
  command = [sys.executable, "-m", ENTRYPOINT, f"--checkpoint={checkpoint}",
             f"--host={host}", f"--port={port}",
             *(f"--{name}={value}" for name, value in flag_values.items())]
  with open(log_path, "ab") as log:
    process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
  base_url = f"http://{host}:{port}/v1"
  try:
    wait_until_healthy(base_url, timeout_s, process, log_path)
  except BaseException:
    stop_process(process)
    raise
  return process, base_url


def stop_process(process: subprocess.Popen, grace_s: float = 10.0) -> None:
  """SIGTERM, then SIGKILL after `grace_s`."""
  if process.poll() is None:
    process.terminate()
    try:
      process.wait(grace_s)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()


@contextlib.contextmanager
def serving(checkpoint: str, **kwargs: Any) -> Iterator[str]:
  """`start_subprocess` as a context manager: yields the base URL, stops the server.

  Example:
    >>> with serving("/tmp/tiny_hf", batch_size=8) as url:
    ...   print(HTTPTextModel(url).complete(["The "], max_tokens=8))
  """
  process, base_url = start_subprocess(checkpoint, **kwargs)
  try:
    yield base_url
  finally:
    stop_process(process)


@contextlib.contextmanager
def serving_app(api: fastapi.FastAPI, host: str = "127.0.0.1", port: int | None = None,
                graceful_shutdown_s: float | None = None) -> Iterator[str]:
  """Serves `api` (from `make_app`) with uvicorn in a thread of this process; yields the
  base URL once /health answers, and shuts the server down on exit (requests still open
  after `graceful_shutdown_s` get a 503; None: wait for them).

  Example:
    >>> with serving_app(make_app(simulated_role, model_name="sim")) as url:
    ...   HTTPTextModel(url).complete(["2 + 2 ="], max_tokens=4)
  """
  import uvicorn  # pylint: disable=import-outside-toplevel

  port = port or free_port(host)
  server = uvicorn.Server(uvicorn.Config(api, host=host, port=port, log_level="warning",
                                        timeout_graceful_shutdown=graceful_shutdown_s))
  thread = threading.Thread(target=server.run, name="serve_lm", daemon=True)
  thread.start()
  base_url = f"http://{host}:{port}/v1"
  try:
    wait_until_healthy(base_url, timeout_s=30.0)
    yield base_url
  finally:
    server.should_exit = True
    thread.join(10.0)
