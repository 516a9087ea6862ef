"""``coder-agent chat`` in a real terminal (a pseudo-terminal) against a fake server on
loopback: prompts typed, answers streamed, a client tool from a module, Ctrl-C interrupting a
turn on the server while the session goes on, the slash commands, Ctrl-D ending it."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coder_integrations.fake_server import FakeCoderServer

from .terminal import CLI, Terminal, environment

LONG = " ".join(f"word{i}" for i in range(300))

TOOLS = '''
from coder_proto import tool

@tool
def get_weather(city: str) -> dict:
    """Get the current weather for a city."""
    return {"city": city, "temp_c": 21, "conditions": "sunny"}
'''


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.03) as server:
        yield server


def _env(server: FakeCoderServer) -> dict[str, str]:
    return environment(
        CODER_URL=server.url,
        CODER_SESSION_TOKEN=server.token,
        CODER_ORG_ID=server.organization_id,
    )


def _wait_for(condition: Callable[[], bool]) -> None:
    """The interrupt is sent in the background as the turn ends: wait (bounded) for it."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _chat_id(screen: str) -> str:
    found = re.search(r"chat_id=(\S+) last_seen_message_id=(\d+)", screen)
    assert found, screen
    return found.group(1)


def test_a_session_with_history_a_tool_ctrl_c_and_archive(
    server: FakeCoderServer, tmp_path: Path
) -> None:
    tools = tmp_path / "weather_tools.py"
    tools.write_text(TOOLS)
    with Terminal("chat", "--tools", str(tools), env=_env(server)) as term:
        term.expect("Ctrl-D ends the session")
        term.expect("> ")
        term.type("remember the number 7")
        term.expect("You said: remember the number 7")
        term.expect("> ")

        term.type("What is the weather in Paris?")
        term.expect('[client tool call] get_weather({"city":"Paris"})')
        term.expect('get_weather returned {"city":"Paris","temp_c":21,"conditions":"sunny"}')
        term.expect("> ")
        (chat_id,) = server.model.chats
        # One chat with both turns: the session keeps its chat.
        users = [m for m in server.model.chats[chat_id].messages if m.role == "user"]
        assert len(users) == 2

        term.type(LONG)
        term.expect("You said: word0 word1 word2")
        term.ctrl_c()
        rest = term.expect("[interrupted: the run was stopped on the server]")
        term.expect("> ")
        assert "word299" not in rest  # the answer stopped short of the whole echo
        _wait_for(lambda: server.counters.requests["interrupt_chat"] == 1)

        # The session goes on, on the same chat.
        term.type("still there?")
        term.expect("You said: still there?")
        term.expect("> ")
        assert list(server.model.chats) == [chat_id]

        term.type("/archive")
        term.expect(f"[archived chat {chat_id}; the next message starts a new one]")
        assert server.model.chats[chat_id].archived

        term.type("a new beginning")
        term.expect("You said: a new beginning")
        term.expect("> ")
        term.ctrl_d()
        assert term.wait() == 0
    (new_chat,) = [c for c in server.model.chats if c != chat_id]
    assert _chat_id(term.screen[term.seen :]) == new_chat
    assert not server.model.chats[new_chat].archived
    assert server.token not in term.screen


def test_slash_commands_and_ctrl_c_at_the_prompt(server: FakeCoderServer) -> None:
    with Terminal("chat", env=_env(server)) as term:
        term.expect("> ")
        term.type("/help")
        for command in ("/reset", "/interrupt", "/archive", "/help", "/quit"):
            term.expect(command)
        term.type("/archive")
        term.expect("[no chat yet: nothing to archive]")
        term.type("/interrupt")
        term.expect("[no chat yet: nothing to interrupt]")
        term.type("/frobnicate")
        term.expect("[unknown command /frobnicate; /help lists the commands]")
        term.expect("> ")  # at the prompt, as the user who presses Ctrl-C there is
        term.ctrl_c()
        term.expect("^C")
        term.type("first chat")
        term.expect("You said: first chat")
        (first,) = server.model.chats
        term.type("/interrupt")
        term.expect(f"[chat {first} has no running turn to interrupt]")
        term.type("/reset")
        term.expect(f"[the next message starts a new chat (chat {first} is kept)]")
        term.type("second chat")
        term.expect("You said: second chat")
        term.expect("> ")
        term.type("/quit")
        assert term.wait() == 0
    assert len(server.model.chats) == 2
    assert not any(chat.archived for chat in server.model.chats.values())
    second = next(c for c in server.model.chats if c != first)
    assert f"continue with: coder-agent chat --chat-id {second}" in term.screen


def test_piped_lines_are_turns_and_the_end_of_input_ends_the_session(
    server: FakeCoderServer,
) -> None:
    result = subprocess.run(
        [*CLI, "chat"],
        input="hello there\n\nsay it again\n",
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "Hello! I am the fake Coder agent" in result.stdout
    assert "You said: say it again" in result.stdout
    # Nothing for a terminal: no prompt, no banner, no progress, no colours.
    assert "> " not in result.stdout and "\x1b" not in result.stdout + result.stderr
    (chat_id,) = server.model.chats
    assert _chat_id(result.stderr) == chat_id


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_here", "no module named 'no_such_module_here'"),
        ("missing.py", "missing.py: no such file"),
        ("json", "defines no tools"),
        ("json:nothing", "has no attribute 'nothing'"),
        ("json:dumps", "expected a list of tools"),
    ],
)
def test_tools_that_cannot_be_loaded_are_a_usage_error(
    server: FakeCoderServer, spec: str, message: str
) -> None:
    result = subprocess.run(
        [*CLI, "chat", "--tools", spec],
        input="",
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"coder-agent chat: --tools {spec}: ") and message in line


def test_tools_from_a_module_name_with_a_tools_list(
    server: FakeCoderServer, tmp_path: Path
) -> None:
    (tmp_path / "shop_tools.py").write_text(
        "def check_stock(item: str) -> int:\n"
        '    """How many of the item are in stock."""\n'
        "    return 3\n"
        "TOOLS = [check_stock]\n"
    )
    result = subprocess.run(
        [*CLI, "chat", "--fake", "--tools", "shop_tools"],
        input="Check stock of apples please\n",
        env=environment(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "[client tool call] check_stock" in result.stdout
    assert "check_stock returned 3" in result.stdout


def _piped(
    server: FakeCoderServer | None, *argv: str, stdin: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "chat", *argv],
        input=stdin,
        env=_env(server) if server is not None else environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_failed_or_late_turn_ends_the_turn_not_the_session(server: FakeCoderServer) -> None:
    from coder_proto.fake import Fail, Script

    server.config.scripts.add("doomed", Script((Fail(message="model unavailable"),)))
    result = _piped(server, "--timeout", "0.3", stdin=f"doomed prompt\n{LONG}\nhello there\n")
    assert result.returncode == 0, result.stderr
    assert "model unavailable" in result.stderr
    assert "[the --timeout deadline passed: the run was interrupted]" in result.stderr
    assert "Hello! I am the fake Coder agent" in result.stdout
    (chat_id,) = server.model.chats
    assert _chat_id(result.stderr) == chat_id


def test_an_unreachable_deployment_fails_each_turn_and_creates_no_chat() -> None:
    flags = ["--url", "http://127.0.0.1:9", "--token", "t", "--organization-id", "o"]
    result = _piped(None, *flags, stdin="hi\n")
    assert result.returncode == 0, result.stderr
    assert (
        "[the turn failed: cannot reach the Coder deployment at http://127.0.0.1:9" in result.stderr
    )
    assert result.stderr.rstrip().endswith("no chat was created")


def test_an_unknown_chat_is_one_line_and_exit_1(server: FakeCoderServer) -> None:
    result = _piped(server, "--chat-id", "not-a-chat", "--last-seen-message-id", "3", stdin="")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("coder-agent chat: CoderApiError")


def test_sigterm_during_a_turn_interrupts_it_and_ends_the_session(
    server: FakeCoderServer,
) -> None:
    import signal

    with Terminal("chat", env=_env(server)) as term:
        term.expect("> ")
        term.type(LONG)
        term.expect("You said: word0 word1")
        term.process.send_signal(signal.SIGTERM)
        term.expect("coder-agent chat: terminated by SIGTERM; the run was stopped")
        assert term.wait() == 143
    (chat_id,) = server.model.chats
    assert _chat_id(term.screen) == chat_id
    assert server.counters.requests["interrupt_chat"] == 1
