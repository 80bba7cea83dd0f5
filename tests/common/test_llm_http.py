"""Tests of the HTTP text model (common/llm/http.py) against our own OpenAI-compatible
server (experiments/serve_lm.py), which serves the trained tiny LM from a Hugging Face
folder in a subprocess on 127.0.0.1: completions, chat, stop strings, concurrent
requests (batched, each its own answer), 400/422 errors, a server killed mid-request,
connection refused; retries, API key and malformed answers through httpx.MockTransport;
batching order and /health during decoding with a scripted model served in-process.
Nothing reaches beyond 127.0.0.1."""

import concurrent.futures
import json
import re
import subprocess
import sys
import threading
import time

import httpx
import pytest

from common import llm
from experiments import serve_lm

N = 12                                  # max_tokens of most requests (one compiled shape)
PROMPTS = ["The ", "def f(x):", "import o", "a", "Hello, wor", "class ", "for i in", "x = "]


@pytest.fixture(scope="module")
def server(tiny_hf_dir):
  process, url = serve_lm.start_subprocess(tiny_hf_dir, model_name="tiny", batch_size=8,
                                           batch_wait_ms=20)
  yield url
  serve_lm.stop_process(process)


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


def test_server_killed_while_a_client_waits_gives_a_clear_error(tiny_hf_dir):
  process, url = serve_lm.start_subprocess(tiny_hf_dir, batch_size=8)
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
    serve_lm.stop_process(process)
  assert not thread.is_alive() and "error" in outcome, outcome
  message = str(outcome["error"])
  assert outcome["at"] - killed < 5.0
  assert url in message and "\n" not in message
  assert re.search(r": (the server closed the connection without answering|the connection "
                   r"broke .*); then connection refused", message), message


def test_connection_refused_and_check_name_the_url():
  url = f"http://127.0.0.1:{serve_lm.free_port()}/v1"
  lm = llm.HTTPTextModel(url, model="m", max_retries=1, backoff=0.01)
  with pytest.raises(llm.TextModelError, match=r"POST http://127\.0\.0\.1:\d+/v1/completions: "
                     r"connection refused .*\(2 attempts\)") as e:
    lm.complete(["The "], max_tokens=4)
  assert "\n" not in str(e.value)
  with pytest.raises(llm.TextModelError, match=f"text model {url} is not usable: GET "
                     f"{url}/models: connection refused"):
    lm.check()


def test_check_names_a_model_the_server_does_not_serve(server):
  with pytest.raises(llm.TextModelError,
                     match=r"does not serve model 'nope'; it serves \['tiny'\]"):
    llm.HTTPTextModel(server, model="nope", max_retries=0).check()


@pytest.mark.parametrize("flag_args, message", [
    ([], "--checkpoint is required"),
    (["--checkpoint=/no/such/folder"], "is not a directory"),
])
def test_serve_lm_rejects_bad_flags_with_one_line(flag_args, message):
  proc = subprocess.run([sys.executable, "-m", "experiments.serve_lm", *flag_args],
                        capture_output=True, text=True, timeout=120, cwd=serve_lm.REPO)
  lines = proc.stderr.strip().splitlines()
  assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr


# -------------------------------------------------------- the client alone (MockTransport)


def _mock(handler, **kwargs):
  return llm.HTTPTextModel("http://mock.invalid/v1", model="m", backoff=0.0,
                           transport=httpx.MockTransport(handler), **kwargs)


def _completion(texts, indices=None):
  indices = range(len(texts)) if indices is None else indices
  return httpx.Response(200, json={"choices": [{"index": i, "text": t}
                                               for i, t in zip(indices, texts)]})


def test_api_key_comes_from_the_environment(monkeypatch):
  seen = []

  def handler(request):
    seen.append(request.headers.get("authorization"))
    return _completion(["ok"])

  monkeypatch.setenv("TEST_LLM_KEY", "sk-local-test")
  _mock(handler, api_key_env="TEST_LLM_KEY").complete(["hi"], max_tokens=2)
  monkeypatch.delenv("TEST_LLM_KEY")
  _mock(handler, api_key_env="TEST_LLM_KEY").complete(["hi"], max_tokens=2)
  assert seen == ["Bearer sk-local-test", None]


def test_retries_503_and_429_then_succeeds_but_never_retries_400():
  answers = [httpx.Response(503, json={"error": {"message": "warming up"}}),
             httpx.Response(429, json={"detail": "slow down"}), _completion(["b", "a"], [1, 0])]
  calls = []

  def handler(request):
    calls.append(json.loads(request.content))
    return answers[len(calls) - 1]

  assert _mock(handler, max_retries=2).complete(["x", "y"], max_tokens=3) == ["a", "b"]
  assert len(calls) == 3 and calls[0]["prompt"] == ["x", "y"] and calls[0]["model"] == "m"
  calls.clear()
  answers[:] = [httpx.Response(400, json={"error": {"message": "bad prompt"}})] * 3
  with pytest.raises(llm.TextModelError, match=r"HTTP 400: bad prompt$"):
    _mock(handler, max_retries=2).complete(["x"], max_tokens=3)
  assert len(calls) == 1


@pytest.mark.parametrize("response, match", [
    (httpx.Response(200, content=b"<html>oops"), "malformed JSON in the response"),
    (httpx.Response(200, json={"choices": []}), "0 choices, expected 1"),
    (httpx.Response(200, json={"choices": [{"index": 0}]}), r"choices\[0\] has no text string"),
    (httpx.Response(200, json={"result": "x"}), "no choices list"),
    (httpx.Response(502, text="Bad Gateway"), r"HTTP 502: Bad Gateway \(2 attempts\)"),
    (httpx.Response(422, json={"detail": [{"loc": ["body", "prompt"], "msg": "Field required"}]}),
     "HTTP 422: body.prompt: Field required"),
])
def test_bad_answers_are_one_line_errors(response, match):
  with pytest.raises(llm.TextModelError, match=match) as e:
    _mock(lambda request: response, max_retries=1).complete(["x"], max_tokens=3)
  assert "\n" not in str(e.value)


def test_timeouts_are_retried_then_reported():
  calls = []

  def handler(request):
    calls.append(1)
    raise httpx.ReadTimeout("timed out", request=request)

  with pytest.raises(llm.TextModelError, match=r"timed out after 0.5 s \(3 attempts\)"):
    _mock(handler, timeout=0.5, max_retries=2).complete(["x"], max_tokens=3)
  assert len(calls) == 3


def test_text_model_from_spec(tiny_hf_dir):
  assert isinstance(llm.text_model_from_spec("http://127.0.0.1:9/v1", timeout=1.0),
                    llm.HTTPTextModel)
  assert isinstance(llm.text_model_from_spec("https://example.invalid/v1"), llm.HTTPTextModel)
  local = llm.text_model_from_spec(f"hf:{tiny_hf_dir}", batch_size=2)
  assert isinstance(local, llm.LocalTextModel) and local.batch_size == 2
  for bad in ("simulated", "hf:", "ftp://x", ""):
    with pytest.raises(ValueError, match=r"is not recognised; expected one of http://HOST:PORT"):
      llm.text_model_from_spec(bad)


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
  api = serve_lm.make_app(scripted, model_name="scripted", batch_size=4, batch_wait_s=0.0)
  with serve_lm.serving_app(api) as url:
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
