"""`HTTPTextModel`: any OpenAI-compatible endpoint as a `TextModel`.

One client reaches every server that speaks the OpenAI wire format: our own
(`common.llm.server`; `python -m experiments.serve_lm`), vLLM, llama.cpp's
`llama-server`, Ollama. It posts to `{base_url}/completions` (all prompts in one
request) or `{base_url}/chat/completions` (one request per prompt, a few at a time),
with a timeout, bounded retries with exponential backoff (connection errors, timeouts,
429 and 5xx only; never other 4xx), and one-line `TextModelError`s that name the URL
and carry the server's own message. The API key, if any, is read from an environment
variable, never from a file, and is sent only over https or to a loopback address
(`send_key_over_http=True` for a trusted plain-http network).
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import json
import logging
import math
import os
import time
from collections.abc import Sequence
from typing import Any
from urllib import parse as urlparse

import httpx

from common.llm import base

ENDPOINTS = ("completions", "chat")
LOG = logging.getLogger(__name__)
_RETRIED = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)

# httpx logs every request at INFO, which absl shows: one line per call in an experiment.
if logging.getLogger("httpx").level == logging.NOTSET:
  logging.getLogger("httpx").setLevel(logging.WARNING)


def is_loopback(host: str) -> bool:
  """Whether `host` (a name or an address, IPv6 with or without brackets) is this
  machine's loopback: "localhost", 127.0.0.0/8 or ::1.

  Example:
    >>> is_loopback("127.0.0.1"), is_loopback("[::1]"), is_loopback("0.0.0.0")
    (True, True, False)
  """
  host = host.strip("[]").lower()
  if host == "localhost":
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


def key_allowed(base_url: str) -> bool:
  """Whether a bearer key may go to `base_url` without leaving in clear text over the
  network: https, or a loopback host."""
  url = urlparse.urlsplit(base_url)
  return url.scheme == "https" or is_loopback(url.hostname or "")


class TextModelError(RuntimeError):
  """A text-model request failed; the message is one line that names the URL."""


def _one_line(text: Any, limit: int = 300) -> str:
  line = " ".join(str(text).split())
  return line if len(line) <= limit else line[:limit - 3] + "..."


def server_message(response: httpx.Response) -> str:
  """The server's own error message, on one line.

  OpenAI's `{"error": {"message": ...}}`, FastAPI's `{"detail": ...}` (a string, or
  validation errors as a list), otherwise the body's text.
  """
  try:
    body = response.json()
  except ValueError:
    return _one_line(response.text) or response.reason_phrase
  if isinstance(body, dict):
    error = body.get("error")
    if isinstance(error, dict) and "message" in error:
      return _one_line(error["message"])
    if isinstance(error, str):
      return _one_line(error)
    detail = body.get("detail")
    if isinstance(detail, list):
      return _one_line("; ".join(
          f"{'.'.join(map(str, d.get('loc', ())))}: {d.get('msg', '')}" if isinstance(d, dict)
          else str(d) for d in detail))
    if detail is not None:
      return _one_line(detail)
  return _one_line(json.dumps(body))


def _transport_reason(error: httpx.HTTPError, timeout: float) -> str:
  if isinstance(error, httpx.TimeoutException):
    return f"timed out after {timeout:g} s"
  if isinstance(error, httpx.ConnectError):
    return ("connection refused (is the server running?)" if "refused" in str(error).lower()
            else f"cannot connect ({_one_line(error)})")
  if isinstance(error, httpx.RemoteProtocolError):
    return "the server closed the connection without answering"
  if isinstance(error, (httpx.ReadError, httpx.WriteError)):
    return f"the connection broke ({_one_line(error) or type(error).__name__})"
  return f"{type(error).__name__} ({_one_line(error)})"


def _check_number(name: str, value: Any, minimum: float, integer: bool = False) -> None:
  ok = not isinstance(value, bool) and isinstance(value, int if integer else (int, float))
  if not ok or not math.isfinite(value) or value < minimum:
    kind = "an int" if integer else "a finite number"
    raise ValueError(f"{name} must be {kind} >= {minimum:g}, got {value!r}")


def _choice_texts(body: Any, n: int, where: str, chat: bool) -> list[str]:
  """The `n` texts of a response's `choices`, ordered by their `index`."""
  choices = body.get("choices") if isinstance(body, dict) else None
  if not isinstance(choices, list) or len(choices) != n:
    got = f"{len(choices)} choices" if isinstance(choices, list) else "no choices list"
    raise TextModelError(f"{where}: malformed response: {got}, expected {n}")
  texts = {}
  for position, choice in enumerate(choices):
    if not isinstance(choice, dict):
      raise TextModelError(f"{where}: malformed response: choices[{position}] is not an object")
    if chat:
      message = choice.get("message")
      text = message.get("content") if isinstance(message, dict) else None
    else:
      text = choice.get("text")
    if not isinstance(text, str):
      field = "message.content" if chat else "text"
      raise TextModelError(f"{where}: malformed response: choices[{position}] has no "
                           f"{field} string")
    texts[choice.get("index", position)] = text
  if set(texts) != set(range(n)):
    raise TextModelError(f"{where}: malformed response: choice indices "
                         f"{sorted(map(str, texts))}, expected 0..{n - 1}")
  return [texts[i] for i in range(n)]


class HTTPTextModel:
  """A `TextModel` served over the OpenAI HTTP API.

  Args:
    base_url: the API root, "http://HOST:PORT/v1" (vLLM, llama.cpp and our server) or
      "http://HOST:11434/v1" (Ollama).
    model: the model name sent with each request; None asks the server
      (`GET {base_url}/models`) and takes the first one it lists.
    api_key_env: the environment variable holding the API key; when it is set, requests
      carry "Authorization: Bearer <key>" if `base_url` is https or a loopback address
      (else the key stays here and a warning says so).
    send_key_over_http: send the key over plain http to another host too (a trusted
      network).
    timeout: seconds to connect, and to wait for each read or write.
    max_retries: further attempts after a connection error, timeout, 429 or 5xx.
    backoff: the wait before retry k is backoff * 2**(k - 1) seconds.
    endpoint: "completions" (`/completions`, every prompt in one request) or "chat"
      (`/chat/completions`, each prompt sent as one user message).
    max_concurrency: chat requests in flight at once.
    transport: an `httpx` transport (tests pass `httpx.MockTransport`).

  Example:
    >>> lm = HTTPTextModel("http://127.0.0.1:8000/v1")
    >>> lm.check()
    ['tiny']
    >>> lm.complete(["def add(a, b):"], max_tokens=32, stop=("\\n\\n",))
  """

  def __init__(self, base_url: str, *, model: str | None = None,
               api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
               max_retries: int = 2, backoff: float = 0.5, endpoint: str = "completions",
               max_concurrency: int = 8, transport: httpx.BaseTransport | None = None,
               send_key_over_http: bool = False):
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
      raise ValueError(f"base_url must start with http:// or https:// (e.g. "
                       f"http://127.0.0.1:8000/v1), got {base_url!r}")
    if endpoint not in ENDPOINTS:
      raise ValueError(f"endpoint must be one of {ENDPOINTS}, got {endpoint!r}")
    _check_number("timeout", timeout, 1e-3)
    _check_number("max_retries", max_retries, 0, integer=True)
    _check_number("backoff", backoff, 0)
    _check_number("max_concurrency", max_concurrency, 1, integer=True)
    self.base_url = base_url.rstrip("/")
    self.model, self.endpoint, self.timeout = model, endpoint, float(timeout)
    self.max_retries, self.backoff, self.max_concurrency = max_retries, backoff, max_concurrency
    key = os.environ.get(api_key_env) if api_key_env else None
    if key and not (send_key_over_http or key_allowed(self.base_url)):
      LOG.warning("not sending the API key from $%s to %s: plain http to a host that is not "
                  "loopback (use https, or send_key_over_http=True on a trusted network)",
                  api_key_env, self.base_url)
      key = None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    self._client = httpx.Client(timeout=self.timeout, headers=headers, transport=transport)
    self._served: list[dict] | None = None

  def __repr__(self) -> str:
    return (f"HTTPTextModel({self.base_url!r}, model={self.model!r}, "
            f"endpoint={self.endpoint!r})")

  def close(self) -> None:
    """Closes the connection pool."""
    self._client.close()

  def __enter__(self) -> "HTTPTextModel":
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def _request(self, method: str, path: str, payload: dict | None = None) -> Any:
    """The JSON body of a 2xx answer, after at most `max_retries` retries."""
    where, failures = f"{method} {self.base_url}/{path}", []
    for attempt in range(self.max_retries + 1):
      if attempt:
        time.sleep(self.backoff * 2 ** (attempt - 1))
      try:
        response = self._client.request(method, f"{self.base_url}/{path}", json=payload)
      except _RETRIED as e:
        failures.append(_transport_reason(e, self.timeout))
        continue
      except httpx.HTTPError as e:
        raise TextModelError(f"{where}: {_transport_reason(e, self.timeout)}") from None
      status = response.status_code
      if status == 429 or status >= 500:
        failures.append(f"HTTP {status}: {server_message(response)}")
        continue
      if status >= 400:
        raise TextModelError(f"{where}: HTTP {status}: {server_message(response)}")
      try:
        return response.json()
      except ValueError:
        raise TextModelError(f"{where}: malformed JSON in the response: "
                             f"{_one_line(response.text, 120)!r}") from None
    distinct = list(dict.fromkeys(failures))     # e.g. disconnected, then refused
    tries = len(failures)
    raise TextModelError(f"{where}: {'; then '.join(distinct)} "
                         f"({tries} attempt{'s' * (tries > 1)})")

  def _models(self) -> list[dict]:
    if self._served is None:
      body = self._request("GET", "models")
      data = body.get("data") if isinstance(body, dict) else None
      if not isinstance(data, list) or not all(isinstance(m, dict) and "id" in m for m in data):
        raise TextModelError(f"GET {self.base_url}/models: malformed response: expected "
                             "{\"data\": [{\"id\": ...}, ...]}")
      self._served = data
    return self._served

  def check(self) -> list[str]:
    """The names of the served models; a one-line `TextModelError` if the server is not
    reachable, answers badly, or does not serve `model`. Run it before a long job."""
    try:
      names = [str(m["id"]) for m in self._models()]
    except TextModelError as e:
      raise TextModelError(f"text model {self.base_url} is not usable: {e}") from None
    if not names or (self.model is not None and self.model not in names):
      raise TextModelError(f"text model {self.base_url} does not serve model {self.model!r}; "
                           f"it serves {names}")
    return names

  def _model_name(self) -> str:
    if self.model is None:
      self.model = self.check()[0]
    return self.model

  @property
  def context(self) -> int | None:
    """The served model's context length, if the server reports one (`max_model_len` in
    `/models`, as ours and vLLM do); None otherwise. Asks the server once."""
    name = self._model_name()
    lengths = [m.get("max_model_len") for m in self._models() if m["id"] == name]
    return int(lengths[0]) if lengths and isinstance(lengths[0], int) else None

  def _payload(self, max_tokens: int, temperature: float, stop: Sequence[str]) -> dict:
    payload = {"model": self._model_name(), "max_tokens": max_tokens,
               "temperature": float(temperature), "n": 1}
    if stop:
      payload["stop"] = list(stop)
    return payload

  def complete(self, prompts: Sequence[str], *, max_tokens: int, temperature: float = 0.0,
               stop: Sequence[str] = ()) -> list[str]:
    """One continuation per prompt, in order (see `common.llm.base`).

    Raises:
      ValueError: a bad argument, before any request.
      TextModelError: the request failed (one line naming the URL).
    """
    prompts = base.check_request(prompts, max_tokens, temperature, stop)
    if not prompts:
      return []
    if self.endpoint == "chat":
      return self.chat([[("user", p)] for p in prompts], max_tokens=max_tokens,
                       temperature=temperature, stop=stop)
    payload = {**self._payload(max_tokens, temperature, stop), "prompt": prompts}
    body = self._request("POST", "completions", payload)
    texts = _choice_texts(body, len(prompts), f"POST {self.base_url}/completions", chat=False)
    return [base.apply_stop(t, stop) for t in texts]

  def chat(self, conversations: Sequence[Sequence[base.ChatMessage | tuple[str, str]]], *,
           max_tokens: int, temperature: float = 0.0, stop: Sequence[str] = ()) -> list[str]:
    """The assistant's reply to each conversation (`/chat/completions`, one request each,
    `max_concurrency` in flight).

    Example:
      >>> lm.chat([[("system", "Be brief."), ("user", "2 + 2?")]], max_tokens=8)
    """
    if isinstance(conversations, (str, bytes)):
      raise ValueError("conversations must be a sequence of message lists, got a string")
    checked = []
    for i, messages in enumerate(conversations):
      try:
        checked.append(base.check_messages(messages))
      except ValueError as e:
        raise ValueError(f"conversations[{i}]: {e}") from None
    base.check_request([], max_tokens, temperature, stop)
    if not checked:
      return []
    payload = self._payload(max_tokens, temperature, stop)
    where = f"POST {self.base_url}/chat/completions"

    def one(messages):
      body = self._request("POST", "chat/completions", {
          **payload, "messages": [{"role": m.role, "content": m.content} for m in messages]})
      return base.apply_stop(_choice_texts(body, 1, where, chat=True)[0], stop)

    if len(checked) == 1:
      return [one(checked[0])]
    with concurrent.futures.ThreadPoolExecutor(min(self.max_concurrency, len(checked))) as pool:
      return list(pool.map(one, checked))
