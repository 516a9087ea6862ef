"""``coder-agent demo`` and ``coder-agent run``: the first user-facing commands, against the
in-process fake server (``--fake`` / no ``CODER_URL``) and against a served fake through the
``CODER_*`` environment variables."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from coder_integrations.cli import build_parser, main
from coder_integrations.fake_server import FakeCoderServer

ENV = ("CODER_URL", "CODER_SESSION_TOKEN", "CODER_ORGANIZATION_ID")


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCoderServer]:
    """A served fake, configured for the commands through the environment."""
    with FakeCoderServer(chunk_delay=0.0005) as server:
        monkeypatch.setenv("CODER_URL", server.url)
        monkeypatch.setenv("CODER_SESSION_TOKEN", server.token)
        monkeypatch.setenv("CODER_ORGANIZATION_ID", server.organization_id)
        yield server


def test_the_commands_are_registered() -> None:
    parser = build_parser()
    for command in ("demo", "run", "fake-server"):
        assert command in parser.format_help()
    args = parser.parse_args(
        ["run", "--json", "--chat-id", "c", "--last-seen-message-id", "3", "hi"]
    )
    assert (args.prompt, args.json, args.chat_id, args.last_seen_message_id) == ("hi", True, "c", 3)


def test_demo_streams_calls_a_tool_and_heals_a_drop_on_the_built_in_fake(
    no_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "Fake Coder server on http://127.0.0.1:" in out
    assert "[client tool call] get_weather" in out
    answer = "That is a pleasant 21 degrees, mild enough for a long walk along the Seine"
    # The drop healed with no lost or repeated text.
    assert out.count(answer) == 1 and out.count("Let me look up the weather") == 1
    assert '"temp_c":21' in out
    assert "segments    2 (requires_action/tool-calls, waiting/stop)" in out
    assert "redials     1 (one drop injected mid-answer" in out
    assert "usage       input " in out and "finish      stop" in out


def test_demo_uses_the_deployment_in_coder_url(
    deployment: FakeCoderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert f"Using the Coder deployment at {deployment.url}" in out
    assert deployment.token not in out
    assert "[client tool call] get_weather" in out and "redials     0" in out
    # Leaving the agent archived the demo's chat.
    chats = deployment.model.chats
    assert chats and all(chat.archived for chat in chats.values())


def test_run_streams_the_text_and_prints_how_to_continue(
    deployment: FakeCoderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "remember the number 7"]) == 0
    first = capsys.readouterr()
    assert first.out == "You said: remember the number 7\n"
    line = next(x for x in first.err.splitlines() if x.startswith("chat_id="))
    fields = dict(item.split("=") for item in line.split())
    chat_id, cursor = fields["chat_id"], fields["last_seen_message_id"]
    assert f"coder-agent run --chat-id {chat_id} --last-seen-message-id {cursor}" in first.err

    code = main(["run", "--chat-id", chat_id, "--last-seen-message-id", cursor, "what number?"])
    second = capsys.readouterr()
    assert code == 0 and second.out == "You said: what number?\n"
    # One chat, continued, nothing archived.
    counters = deployment.counters
    assert counters.requests["create_chat"] == 1 and counters.requests["create_chat_message"] == 1
    # The given cursor was checked against the chat once (it must be one the chat reached).
    assert counters.requests["get_messages"] == 1 and counters.requests["update_chat"] == 0
    printed = first.out + first.err + second.out + second.err
    assert deployment.token not in printed


def test_run_json_prints_one_object(no_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--fake", "--json", "search for otters"]) == 0
    out = capsys.readouterr().out
    body = json.loads(out)
    assert body["text"] == "I found one result: https://example.com/"
    assert body["finish_reason"] == "stop" and body["chat_id"]
    assert isinstance(body["last_seen_message_id"], int)
    assert body["usage"]["input_tokens"] > 0 and body["usage"]["output_tokens"] > 0
    (call,) = body["tool_calls"]
    assert call["tool_name"] == "web_search" and call["provider_executed"] is True
    assert body["sources"][0]["url"] == "https://example.com/"


def test_run_reports_configuration_errors(no_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "hi"]) == 2
    assert "CODER_URL" in capsys.readouterr().err
    assert main(["run", "--fake", "--last-seen-message-id", "3", "hi"]) == 2
    assert "--last-seen-message-id needs --chat-id" in capsys.readouterr().err


def test_run_exits_non_zero_when_the_run_fails(
    deployment: FakeCoderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    from coder_proto.fake import Fail, Script

    deployment.config.scripts.add("doomed", Script((Fail(message="model unavailable"),)))
    assert main(["run", "doomed prompt"]) == 1
    assert "model unavailable" in capsys.readouterr().err
