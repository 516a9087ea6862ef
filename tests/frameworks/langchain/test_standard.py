"""LangChain's own standard suites (``langchain-tests``) against ``ChatCoder`` on the fake
server. Each test that does not apply to a Coder chat is skipped with the Coder fact that rules
it out."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_tests.integration_tests import ChatModelIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests

from coder_integrations.fake_server import FakeCoderServer
from coder_io_asyncio.integrations.langchain import ChatCoder
from coder_proto.fake import CallClientTool, Script

from .media import PDF, PDF_B64, PNG, PNG_B64, user_messages

# The suites' async tests run on asyncio, through anyio's pytest plugin.
pytestmark = pytest.mark.anyio

_server: dict[str, Any] = {}


def _does_not_apply(reason: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Replace a standard test that does not apply to a Coder chat: it is skipped with the
    Coder fact as its reason (the suites want such replacements marked xfail with a reason)."""

    def replace(test: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(test)
        def skipped(self: object) -> None:
            pytest.skip(reason)

        return pytest.mark.xfail(reason=reason)(skipped)

    return replace


def _replaced(reason: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a standard test replaced by one of ours, with the reason. The suites want every
    replacement marked xfail with a reason; the false condition keeps the replacement an
    ordinary test that must pass."""
    mark: Callable[[Callable[..., None]], Callable[..., None]] = pytest.mark.xfail(
        False, reason=reason
    )
    return mark


@pytest.fixture(scope="module", autouse=True)
def _serve(coder_server: FakeCoderServer) -> Iterator[None]:
    # The scripted model calls a tool when the prompt names it; these prompts only describe
    # the call they expect, so the script book is told.
    scripts = coder_server.config.scripts
    scripts.add(
        r"generate a Pirate greeting",
        Script([CallClientTool(name="greeting_generator", args={"answer_style": "Pirate"})]),
    )
    scripts.add(
        r"Create a customer named '(?P<name>[^']+)'",
        Script(
            [
                CallClientTool(
                    name="unicode_customer",
                    args={"customer_name": "{name}", "description": "a technology company"},
                )
            ]
        ),
    )
    _server.update(
        base_url=coder_server.url,
        api_key=coder_server.token,
        organization_id=coder_server.organization_id,
    )
    yield
    _server.clear()


class _Closing:
    """Each test's model is closed after it: its paused chats' sockets and its loop. Images
    and PDFs given as content become chat attachments; URLs are not fetched and audio has no
    Coder attachment type."""

    @property
    def supports_image_inputs(self) -> bool:
        return True

    @property
    def supports_pdf_inputs(self) -> bool:
        return True

    @property
    def supports_image_urls(self) -> bool:
        return False

    @property
    def supports_audio_inputs(self) -> bool:
        return False

    @pytest.fixture
    def model(self, request: Any) -> Iterator[ChatCoder]:
        extra = getattr(request, "param", None) or {}
        model = ChatCoder(**{**self.standard_chat_model_params, **_server, **extra})
        yield model
        model.close()


class TestChatCoderUnit(_Closing, ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[ChatCoder]:
        return ChatCoder

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return dict(_server)

    @property
    def has_tool_choice(self) -> bool:
        # Coder has no tool choice: the model decides whether to call a client tool.
        return False

    @property
    def model_override_value(self) -> str:
        return "claude-haiku-4-5"

    @property
    def init_from_env_params(self) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
        env = {"CODER_URL": "https://coder.example.com", "CODER_SESSION_TOKEN": "s3cret"}
        return env, {}, {"base_url": "https://coder.example.com", "token": "s3cret"}

    @_does_not_apply(
        reason="ChatCoder is not LangChain-serializable: it holds a session token and live "
        "chats, which a serialized model must not carry"
    )
    def test_serdes(self) -> None:
        raise AssertionError  # replaced by the skip


class TestChatCoderIntegration(_Closing, ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[ChatCoder]:
        return ChatCoder

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return dict(_server)

    @property
    def has_tool_choice(self) -> bool:
        # Coder has no tool choice: the model decides whether to call a client tool.
        return False

    @property
    def model_override_value(self) -> str:
        return "claude-haiku-4-5"

    @_does_not_apply(reason="Coder has no tool choice: the model decides whether to call a tool")
    def test_tool_choice(self) -> None:
        raise AssertionError  # replaced by the skip

    @_does_not_apply(
        reason="Coder has no server-side response format (no JSON mode); structured output "
        "goes through a tool"
    )
    def test_json_mode(self) -> None:
        raise AssertionError  # replaced by the skip

    @_replaced(
        reason="the standard test downloads its PDF from the internet; this one makes it "
        "locally and checks the file the chat's user message carries"
    )
    def test_pdf_inputs(self, model: ChatCoder, coder_server: FakeCoderServer) -> None:
        """The standard test's calls (LangChain's file block, OpenAI's chat-format file) with
        a PDF made here instead of one fetched from the internet: each becomes a file part of
        the chat's user message, after its text."""
        blocks: list[dict[str, Any]] = [
            {"type": "file", "base64": PDF_B64, "mime_type": "application/pdf"},
            {
                "type": "file",
                "file": {
                    "filename": "test_file.pdf",
                    "file_data": f"data:application/pdf;base64,{PDF_B64}",
                },
            },
        ]
        for block in blocks:
            text = {"type": "text", "text": "Summarize this document:"}
            answer = model.invoke([HumanMessage([text, block])])
            chat_id = answer.response_metadata["coder_chat_id"]
            assert user_messages(coder_server, chat_id) == [
                [("text", "Summarize this document:"), ("application/pdf", PDF)]
            ]

    @_replaced(
        reason="the standard test downloads its image from the internet; this one makes it "
        "locally and checks the file the chat's user message carries"
    )
    def test_image_inputs(self, model: ChatCoder, coder_server: FakeCoderServer) -> None:
        """The standard test's calls (OpenAI's chat-format data URL, LangChain's base64 image
        block) with a PNG made here instead of one fetched from the internet: each becomes a
        file part of the chat's user message, after its text. Image URLs are not fetched
        (``supports_image_urls`` is false)."""
        blocks: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
            {"type": "image", "base64": PNG_B64, "mime_type": "image/png"},
        ]
        for block in blocks:
            text = {"type": "text", "text": "Give a concise description of this image."}
            answer = model.invoke([HumanMessage([text, block])])
            chat_id = answer.response_metadata["coder_chat_id"]
            assert user_messages(coder_server, chat_id) == [
                [("text", "Give a concise description of this image."), ("image/png", PNG)]
            ]

    @_does_not_apply(reason="Coder chat attachments take no audio types")
    def test_audio_inputs(self) -> None:
        raise AssertionError  # replaced by the skip

    @_does_not_apply(reason="a Coder client tool result is a JSON value: it carries no image")
    def test_image_tool_message(self) -> None:
        raise AssertionError  # replaced by the skip

    @_does_not_apply(reason="a Coder client tool result is a JSON value: it carries no PDF")
    def test_pdf_tool_message(self) -> None:
        raise AssertionError  # replaced by the skip

    @_does_not_apply(
        reason="Anthropic-format inputs (cache control, documents, tool_use blocks in user "
        "turns) have no Coder counterpart: a chat message is text and files"
    )
    def test_anthropic_inputs(self) -> None:
        raise AssertionError  # replaced by the skip

    @_does_not_apply(
        reason="records HTTP cassettes of a hosted provider; these tests serve the fake Coder "
        "server on loopback instead"
    )
    def test_stream_time(self) -> None:
        raise AssertionError  # replaced by the skip
