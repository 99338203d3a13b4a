"""What each HTTP provider sends upstream, as a loopback server received it: the system prompt
first, the conversation, the model, streaming switched on, tools, and the auth header."""

from __future__ import annotations

import pytest

from holdback.providers.anthropic import API_VERSION, AnthropicProvider
from holdback.providers.base import ChatMessage, ChatRequest, ToolSpec
from holdback.providers.http import StreamSettings
from holdback.providers.openai_chat import OpenAIChatProvider
from holdback.providers.openai_responses import OpenAIResponsesProvider
from holdback.providers.prompt import SYSTEM_PROMPT
from holdback.providers.registry import make_provider
from tests.providers.fakeserver import FakeUpstream, Reply
from tests.providers.streams import capture, collect

pytestmark = pytest.mark.anyio

TOOL = ToolSpec(
    "send_email",
    "Send an email",
    {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]},
)
REQUEST = ChatRequest(
    [
        ChatMessage("system", "Answer in French."),
        ChatMessage("user", "Email <EMAIL_1> please"),
        ChatMessage("assistant", "To <EMAIL_1>? Sure."),
        ChatMessage("user", "Yes, and cc <EMAIL_2>."),
    ],
    tools=[TOOL],
)
TURNS = [
    {"role": "user", "content": "Email <EMAIL_1> please"},
    {"role": "assistant", "content": "To <EMAIL_1>? Sure."},
    {"role": "user", "content": "Yes, and cc <EMAIL_2>."},
]
SYSTEM = SYSTEM_PROMPT + "\n\nAnswer in French."
SCHEMA = {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]}


async def test_openai_chat_request(upstream: FakeUpstream, fast: StreamSettings) -> None:
    upstream.enqueue(Reply.sse(capture("openai_chat/openai_python_content_logprobs.sse")))
    provider = OpenAIChatProvider(
        "gpt-4o-mini", base_url=upstream.url + "/v1/", api_key="sk-abc", settings=fast
    )
    await collect(provider, REQUEST)
    [sent] = upstream.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer sk-abc"
    assert sent.headers["content-type"] == "application/json"
    assert sent.json() == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": SYSTEM}, *TURNS],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "send_email",
                    "description": "Send an email",
                    "parameters": SCHEMA,
                },
            }
        ],
    }


async def test_openai_responses_request(upstream: FakeUpstream, fast: StreamSettings) -> None:
    upstream.enqueue(Reply.sse(capture("openai_responses/responses_refusal_incomplete.sse")))
    provider = OpenAIResponsesProvider(
        "o4-mini", base_url=upstream.url + "/v1", api_key="sk-abc", settings=fast
    )
    request = ChatRequest(REQUEST.messages, tools=REQUEST.tools, max_output_tokens=300)
    await collect(provider, request)
    [sent] = upstream.requests
    assert (sent.method, sent.path) == ("POST", "/v1/responses")
    assert sent.headers["authorization"] == "Bearer sk-abc"
    assert sent.json() == {
        "model": "o4-mini",
        "instructions": SYSTEM,
        "input": TURNS,
        "stream": True,
        "store": False,
        "tools": [
            {
                "type": "function",
                "name": "send_email",
                "description": "Send an email",
                "parameters": SCHEMA,
            }
        ],
        "max_output_tokens": 300,
    }


async def test_anthropic_request(upstream: FakeUpstream, fast: StreamSettings) -> None:
    upstream.enqueue(Reply.sse(capture("anthropic/anthropic_docs_basic_streaming.sse")))
    provider = AnthropicProvider(
        "claude-sonnet-4-5", base_url=upstream.url, api_key="sk-ant-abc", settings=fast
    )
    await collect(provider, REQUEST)
    [sent] = upstream.requests
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == "sk-ant-abc"
    assert sent.headers["anthropic-version"] == API_VERSION
    assert "authorization" not in sent.headers
    assert sent.json() == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "system": SYSTEM,
        "messages": TURNS,
        "stream": True,
        "tools": [{"name": "send_email", "description": "Send an email", "input_schema": SCHEMA}],
    }


async def test_request_model_overrides_and_no_key_sends_no_auth_header(
    upstream: FakeUpstream, fast: StreamSettings
) -> None:
    """A local OpenAI-compatible server (Ollama, llama.cpp) needs no key."""
    upstream.enqueue(Reply.sse(capture("openai_chat/openai_python_content_logprobs.sse")))
    provider = OpenAIChatProvider("llama3.1:8b", base_url=upstream.url + "/v1", settings=fast)
    request = ChatRequest([ChatMessage("user", "hi")], model="qwen3:4b", max_output_tokens=64)
    await collect(provider, request)
    [sent] = upstream.requests
    assert "authorization" not in sent.headers
    body = sent.json()
    assert body["model"] == "qwen3:4b"
    assert body["max_completion_tokens"] == 64
    assert "tools" not in body
    assert body["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "hi"},
    ]


@pytest.mark.parametrize(
    ("spec", "capture_name", "path", "header", "value"),
    [
        ("openai:gpt-4o", "openai_chat/openai_python_content_logprobs.sse",
         "/v1/chat/completions", "authorization", "Bearer sk-env"),
        ("openai-responses:gpt-4o", "openai_responses/responses_refusal_incomplete.sse",
         "/v1/responses", "authorization", "Bearer sk-env"),
        ("anthropic:claude-sonnet-4-5", "anthropic/anthropic_docs_basic_streaming.sse",
         "/v1/messages", "x-api-key", "sk-ant-env"),
    ],
)  # fmt: skip
async def test_registry_providers_use_the_environment(
    upstream: FakeUpstream,
    fast: StreamSettings,
    spec: str,
    capture_name: str,
    path: str,
    header: str,
    value: str,
) -> None:
    env = {
        "OPENAI_BASE_URL": upstream.url + "/v1",
        "OPENAI_API_KEY": "sk-env",
        "ANTHROPIC_BASE_URL": upstream.url,
        "ANTHROPIC_API_KEY": "sk-ant-env",
    }
    upstream.enqueue(Reply.sse(capture(capture_name)))
    provider = make_provider(spec, env=env, settings=fast)
    await collect(provider, ChatRequest([ChatMessage("user", "hi")]))
    [sent] = upstream.requests
    assert sent.path == path
    assert sent.headers[header] == value
    assert sent.json()["model"] == spec.partition(":")[2]
