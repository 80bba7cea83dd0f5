"""Tests of our OpenAI-compatible server (common/llm/server.py) through the HTTP client
(common/llm/http.py): the trained tiny LM served from a Hugging Face folder by
`start_subprocess` (the `python -m experiments.serve_lm` command line) on 127.0.0.1:
completions, chat, stop strings, concurrent requests (batched, each its own answer),
400/422 errors, a server killed mid-request; batching order and /health during decoding
with a scripted model served in-process by `make_app` + `serving_app`. Nothing reaches
beyond 127.0.0.1. The client alone is tested in test_llm_http.py, the command line's
flag errors in tests/experiments/test_serve_lm.py."""

import concurrent.futures
import re
import threading
import time

import httpx
import pytest

from common import llm
from common.llm import server as llm_server

N = 12                                  # max_tokens of most requests (one compiled shape)
PROMPTS = ["The ", "def f(x):", "import o", "a", "Hello, wor", "class ", "for i in", "x = "]


@pytest.fixture(scope="module")
def server(tiny_hf_dir):
  process, url = llm_server.start_subprocess(tiny_hf_dir, model_name="tiny", batch_size=8,
                                             batch_wait_ms=20)
  yield url
  llm_server.stop_process(process)


@pytest.fixture(scope="module")
def direct(tiny_hf_dir):
  """The same checkpoint through the local backend, in this process."""
  return llm.LocalTextModel.from_checkpoint(tiny_hf_dir, batch_size=8)


@pytest.fixture(scope="module")
def client(server):
  with llm.HTTPTextModel(server, timeout=60.0, max_retries=0) as c:
    yield c


def _health(url):
  return httpx.get(url.removesuffix("/v1") + "/health", timeout=5.0).json()


# ------------------------------------------------------------------ against the server


def test_completion_equals_the_local_backend(server, client, direct):
  assert client.check() == ["tiny"] and client.context == 1024
  assert isinstance(client, llm.TextModel)
  assert client.complete(PROMPTS[:3], max_tokens=N) == direct.complete(PROMPTS[:3], max_tokens=N)
  body = httpx.post(f"{server}/completions", json={"prompt": "The ", "max_tokens": N,
                                                    "temperature": 0}, timeout=60.0).json()
  assert body["object"] == "text_completion" and body["model"] == "tiny"
  [choice] = body["choices"]
  assert choice["index"] == 0 and choice["finish_reason"] in ("stop", "length")
  assert choice["text"] == direct.complete(["The "], max_tokens=N)[0]
  usage = body["usage"]
  assert usage["prompt_tokens"] == 4 and usage["completion_tokens"] == len(choice["text"])
  assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_chat_completion(server, client, direct):
  conversation = [("system", "Be brief."), ("user", "2 + 2?")]
  want = direct.complete([llm.format_chat(conversation)], max_tokens=N)
  assert client.chat([conversation], max_tokens=N) == want
  as_chat = llm.HTTPTextModel(server, endpoint="chat", max_retries=0)
  assert as_chat.complete(["2 + 2?"], max_tokens=N) == direct.complete(
      [llm.format_chat([("user", "2 + 2?")])], max_tokens=N)
  body = httpx.post(f"{server}/chat/completions", timeout=60.0, json={
      "messages": [{"role": r, "content": c} for r, c in conversation], "max_tokens": N,
      "temperature": 0.0}).json()
  assert body["object"] == "chat.completion"
  assert body["choices"][0]["message"] == {"role": "assistant", "content": want[0]}


def test_stop_sequence_is_cut_by_the_server(server, client):
  full = client.complete(["The "], max_tokens=N)[0]
  assert len(full) >= 3
  stop = full[2]
  body = httpx.post(f"{server}/completions", timeout=60.0, json={
      "prompt": "The ", "max_tokens": N, "temperature": 0, "stop": stop}).json()
  assert body["choices"][0]["text"] == full[:full.index(stop)]
  assert body["choices"][0]["finish_reason"] == "stop"
  assert client.complete(["The "], max_tokens=N, stop=(stop, "\x00")) == [full[:full.index(stop)]]


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(server, client, direct):
  want = direct.complete(PROMPTS, max_tokens=N)
  before = _health(server)
  start = threading.Barrier(len(PROMPTS))

  def one(prompt):
    start.wait()
    return client.complete([prompt], max_tokens=N)[0]

  with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
    got = list(pool.map(one, PROMPTS))
  assert got == want
  after = _health(server)
  assert after["requests"] - before["requests"] == len(PROMPTS)
  assert after["complete_calls"] - before["complete_calls"] < len(PROMPTS)   # batched


def test_oversize_prompt_is_a_400_with_a_message(server, client):
  response = httpx.post(f"{server}/completions", json={"prompt": "x" * 1100, "max_tokens": 4},
                        timeout=60.0)
  assert response.status_code == 400
  error = response.json()["error"]
  assert error["type"] == "invalid_request_error"
  assert "prompt[0] has 1100 tokens" in error["message"] and "context of 1024" in error["message"]
  with pytest.raises(llm.TextModelError,
                     match=r"HTTP 400: prompt\[1\] has 1100 tokens; with max_tokens=4") as e:
    client.complete(["ok", "x" * 1100], max_tokens=4)
  assert server in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("path, body, status, message", [
    ("completions", {"prompt": "The ", "max_tokens": "many"}, 422, "max_tokens"),
    ("completions", {"max_tokens": 4}, 422, "prompt"),
    ("completions", {"prompt": "The ", "max_tokens": 0}, 422, "max_tokens"),
    ("completions", {"prompt": "The ", "temperature": -1}, 422, "temperature"),
    ("completions", {"prompt": "The ", "n": 2}, 400, "n=2 is not supported"),
    ("completions", {"prompt": [], "max_tokens": 4}, 400, "empty list"),
    ("completions", {"prompt": "", "max_tokens": 4}, 400, "encodes to no tokens"),
    ("completions", "{not json", 422, "invalid request body"),
    ("chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}, 400,
     r"messages\[0\] must be"),
    ("chat/completions", {"messages": "hi"}, 422, "messages"),
])
def test_malformed_body_is_a_422_or_400(server, path, body, status, message):
  kwargs = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(
      body, str) else {"json": body}
  response = httpx.post(f"{server}/{path}", timeout=60.0, **kwargs)
  assert response.status_code == status, response.text
  assert re.search(message, response.json()["error"]["message"]), response.text


@pytest.mark.parametrize("field, value", [
    ("echo", True), ("logprobs", 2), ("best_of", 3), ("suffix", "!"), ("top_p", 0.5),
    ("presence_penalty", 0.5), ("logit_bias", {"65": 5}), ("seed", 7), ("frobnicate", 1)])
def test_a_field_that_would_change_the_output_is_a_400_naming_it(server, field, value):
  response = httpx.post(f"{server}/completions", timeout=60.0, json={
      "prompt": "The ", "max_tokens": 4, "temperature": 1.0, field: value})
  assert response.status_code == 400, response.text
  assert response.json()["error"]["message"].startswith(field), response.text


def test_fields_at_values_that_change_nothing_are_accepted(server, client):
  response = httpx.post(f"{server}/completions", timeout=60.0, json={
      "prompt": "The ", "max_tokens": N, "temperature": 0, "echo": False, "logprobs": None,
      "best_of": 1, "top_p": 1.0, "presence_penalty": 0, "user": "me", "seed": 7})
  assert response.status_code == 200, response.text
  assert response.json()["choices"][0]["text"] == client.complete(["The "], max_tokens=N)[0]


def test_usage_counts_the_ids_generated(server, direct):
  prompts = PROMPTS[:4]
  body = httpx.post(f"{server}/completions", timeout=60.0, json={
      "prompt": prompts, "max_tokens": N, "temperature": 0, "stop": ["e"]}).json()
  expected = direct.generate(prompts, max_tokens=N, stop=("e",))
  assert [c["text"] for c in body["choices"]] == [c.text for c in expected]
  assert [c["finish_reason"] for c in body["choices"]] == [c.finish_reason for c in expected]
  assert body["usage"]["completion_tokens"] == sum(c.tokens for c in expected)


def test_server_killed_while_a_client_waits_gives_a_clear_error(tiny_hf_dir):
  process, url = llm_server.start_subprocess(tiny_hf_dir, batch_size=8)
  try:
    waiting = llm.HTTPTextModel(url, timeout=30.0, max_retries=1, backoff=0.05)
    outcome = {}

    def long_request():
      try:
        outcome["texts"] = waiting.complete(PROMPTS * 8, max_tokens=1000)
      except llm.TextModelError as e:
        outcome["error"], outcome["at"] = e, time.monotonic()

    thread = threading.Thread(target=long_request)
    thread.start()
    deadline = time.monotonic() + 30
    while not _health(url)["busy"] and time.monotonic() < deadline:
      time.sleep(0.02)
    process.kill()
    killed = time.monotonic()
    thread.join(20.0)
  finally:
    llm_server.stop_process(process)
  assert not thread.is_alive() and "error" in outcome, outcome
  message = str(outcome["error"])
  assert outcome["at"] - killed < 5.0
  assert url in message and "\n" not in message
  assert re.search(r": (the server closed the connection without answering|the connection "
                   r"broke .*); then connection refused", message), message


def test_check_names_a_model_the_server_does_not_serve(server):
  with pytest.raises(llm.TextModelError,
                     match=r"does not serve model 'nope'; it serves \['tiny'\]"):
    llm.HTTPTextModel(server, model="nope", max_retries=0).check()


# ------------------------------------------- batching, in-process, with a scripted model


class _Scripted:
  """Echoes "<prompt>|<max_tokens>"; the first call waits for `release`; "boom" fails."""

  def __init__(self):
    self.calls, self.release = [], threading.Event()

  def complete(self, prompts, *, max_tokens, temperature=0.0, stop=()):
    self.calls.append((list(prompts), max_tokens))
    if len(self.calls) == 1:
      assert self.release.wait(30)
    if "boom" in prompts:
      raise ValueError("the scripted model refuses 'boom'")
    return [f"{p}|{max_tokens}" for p in prompts]


def test_batches_share_a_key_oldest_first_and_health_answers_while_decoding():
  scripted = _Scripted()
  api = llm_server.make_app(scripted, model_name="scripted", batch_size=4, batch_wait_s=0.0)
  with llm_server.serving_app(api) as url:
    lm = llm.HTTPTextModel(url, max_retries=0)
    requests = [("a0", 5), ("a1", 5), ("b1", 7), ("a2", 5), ("b2", 7), ("boom", 5)]
    with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
      futures = []
      for i, (prompt, n) in enumerate(requests):
        futures.append(pool.submit(lm.complete, [prompt], max_tokens=n))
        while _health(url)["requests"] < i + 1:      # arrive in this order
          time.sleep(0.005)
      status = _health(url)
      assert status["busy"] and status["queued"] == 5   # /health answers while decoding
      scripted.release.set()
      with pytest.raises(llm.TextModelError, match="HTTP 400: the scripted model refuses"):
        futures[-1].result()
      assert [f.result() for f in futures[:-1]] == [[f"{p}|{n}"] for p, n in requests[:-1]]
  assert scripted.calls == [(["a0"], 5), (["a1", "a2", "boom"], 5), (["a1"], 5), (["a2"], 5),
                            (["boom"], 5), (["b1", "b2"], 7)]


class _Blocking:
  """Waits for `release` on every call; "boom" raises an error with internals in it."""

  def __init__(self):
    self.release = threading.Event()

  def complete(self, prompts, *, max_tokens, temperature=0.0, stop=()):
    if "boom" in prompts:
      raise RuntimeError("internal detail /secret/path")
    assert self.release.wait(30)
    return list(prompts)


def test_key_404_405_and_500_answer_in_openai_error_bodies(caplog):
  model = _Blocking()
  model.release.set()
  api = llm_server.make_app(model, model_name="m", batch_wait_s=0.0, api_key="sk-test")
  with llm_server.serving_app(api) as url:
    auth = {"Authorization": "Bearer sk-test"}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
      response = httpx.post(f"{url}/completions", json={"prompt": "a"}, headers=headers)
      assert response.status_code == 401
      assert response.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(url.removesuffix("/v1") + "/health").status_code == 200
    assert httpx.post(f"{url}/completions", json={"prompt": "a"}, headers=auth).json()[
        "choices"][0]["text"] == "a"
    for method, path, status, message in (("POST", "nope", 404, "Invalid URL (POST /v1/nope)"),
                                          ("GET", "completions", 405, "Method GET is not")):
      response = httpx.request(method, f"{url}/{path}", headers=auth)
      assert response.status_code == status
      assert response.json()["error"]["message"].startswith(message), response.text
    response = httpx.post(f"{url}/completions", json={"prompt": "boom"}, headers=auth)
  assert response.status_code == 500 and "secret" not in response.text
  assert response.json()["error"]["type"] == "server_error"
  assert "internal detail /secret/path" in caplog.text       # the log has it


def test_requests_open_at_shutdown_get_a_503():
  model = _Blocking()
  answers = []
  with llm_server.serving_app(llm_server.make_app(model, model_name="m", batch_wait_s=0.0),
                       graceful_shutdown_s=0.2) as url:
    threads = [threading.Thread(target=lambda p=p: answers.append(httpx.post(
        f"{url}/completions", json={"prompt": p}, timeout=30.0))) for p in ("a", "b")]
    for thread in threads:
      thread.start()
    while _health(url)["requests"] < 2:
      time.sleep(0.005)
  for thread in threads:
    thread.join(10.0)
  model.release.set()
  assert [a.status_code for a in answers] == [503, 503]
  assert all("shutting down" in a.json()["error"]["message"] for a in answers)
