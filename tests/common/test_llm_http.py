"""Tests of the HTTP text model (common/llm/http.py) alone: retries, API key, timeouts
and malformed answers through httpx.MockTransport, connection refused on a free
loopback port, and `text_model_from_spec`. Against our own server (common/llm/server.py)
it is tested end to end in test_llm_server.py. Nothing reaches beyond 127.0.0.1."""

import json

import httpx
import pytest

from common import llm
from common.llm import server as llm_server


def test_connection_refused_and_check_name_the_url():
  url = f"http://127.0.0.1:{llm_server.free_port()}/v1"
  lm = llm.HTTPTextModel(url, model="m", max_retries=1, backoff=0.01)
  with pytest.raises(llm.TextModelError, match=r"POST http://127\.0\.0\.1:\d+/v1/completions: "
                     r"connection refused .*\(2 attempts\)") as e:
    lm.complete(["The "], max_tokens=4)
  assert "\n" not in str(e.value)
  with pytest.raises(llm.TextModelError, match=f"text model {url} is not usable: GET "
                     f"{url}/models: connection refused"):
    lm.check()


# -------------------------------------------------------- the client alone (MockTransport)


def _mock(handler, url="http://mock.invalid/v1", **kwargs):
  return llm.HTTPTextModel(url, model="m", backoff=0.0,
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
  _mock(handler, "https://mock.invalid/v1", api_key_env="TEST_LLM_KEY").complete(
      ["hi"], max_tokens=2)
  monkeypatch.delenv("TEST_LLM_KEY")
  _mock(handler, "https://mock.invalid/v1", api_key_env="TEST_LLM_KEY").complete(
      ["hi"], max_tokens=2)
  assert seen == ["Bearer sk-local-test", None]


@pytest.mark.parametrize("url, sent", [
    ("https://api.example.invalid/v1", True), ("http://127.0.0.1:8000/v1", True),
    ("http://localhost:8000/v1", True), ("http://[::1]:8000/v1", True),
    ("http://10.0.0.5:8000/v1", False), ("http://0.0.0.0:8000/v1", False),
    ("http://api.example.invalid/v1", False)])
def test_the_key_goes_only_over_https_or_to_loopback(monkeypatch, caplog, url, sent):
  seen = []

  def handler(request):
    seen.append(request.headers.get("authorization"))
    return _completion(["ok"])

  monkeypatch.setenv("TEST_LLM_KEY", "sk-local-test")
  _mock(handler, url, api_key_env="TEST_LLM_KEY").complete(["hi"], max_tokens=2)
  assert seen == ["Bearer sk-local-test" if sent else None]
  assert ("not sending the API key from $TEST_LLM_KEY" in caplog.text) == (not sent)
  _mock(handler, url, api_key_env="TEST_LLM_KEY", send_key_over_http=True).complete(
      ["hi"], max_tokens=2)
  assert seen[-1] == "Bearer sk-local-test"


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
