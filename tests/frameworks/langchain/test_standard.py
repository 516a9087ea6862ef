"""LangChain's own standard suites (``langchain-tests``) against ``ChatCoder`` on the fake
server. Each test that does not apply to a Coder chat is skipped with the Coder fact that rules
it out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_tests.integration_tests import ChatModelIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests

from coder_io_asyncio.integrations.langchain import ChatCoder
from coder_io_common.fake_server import FakeCoderServer
from coder_proto.fake import CallClientTool, Script

# The suites' async tests run on asyncio, through anyio's pytest plugin.
pytestmark = pytest.mark.anyio

_server: dict[str, Any] = {}


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
    """Each test's model is closed after it: its paused chats' sockets and its loop."""

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
