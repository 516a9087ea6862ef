"""What ``coder-agent run`` shows on a terminal besides the answer: the progress line on
stderr (connecting, streaming, a redial with its count and backoff, the elapsed time) and
reasoning set apart; and that none of it appears when stdout and stderr are pipes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import Say, Script, Think

from .terminal import CLI, Terminal, environment

ANSWER = " ".join(f"part{i}" for i in range(40))


@pytest.fixture
def dropping() -> Iterator[FakeCoderServer]:
    """A fake whose model thinks, then answers in 40 parts; the stream drops once before the
    10th part."""
    with FakeCoderServer(chunk_delay=0.01) as server:
        server.config.scripts.add(
            "think", Script((Think("Let me weigh this carefully."), Say(ANSWER)))
        )
        server.faults.drop_stream_at("message_part", occurrence=10)
        yield server


def _env(server: FakeCoderServer) -> dict[str, str]:
    return environment(
        CODER_URL=server.url,
        CODER_SESSION_TOKEN=server.token,
        CODER_ORGANIZATION_ID=server.organization_id,
    )


def test_a_terminal_shows_progress_a_redial_and_reasoning_apart(
    dropping: FakeCoderServer,
) -> None:
    with Terminal("run", "think about it", env=_env(dropping)) as term:
        term.expect("connecting")
        term.expect("\x1b[2m(thinking) Let me weigh")
        # The reasoning's line ends (and its dim style with it) before the answer starts.
        term.expect("carefully.\x1b[0m\r\n")
        term.expect("part0 part1 ")
        # The redial is a line of its own, in the middle of the answer.
        term.expect("\r\n\x1b[2mstream lost; redialing 1/5 in 1.0 s\x1b[0m\r\n")
        term.expect("part38 part39")
        term.expect("done in ")
        term.expect("chat_id=")
        assert term.wait() == 0
    assert dropping.counters.requests["stream_chat"] == 2
    # The healed answer arrived whole, once.
    for word in ANSWER.split():
        assert term.screen.count(word + " ") + term.screen.count(word + "\r") == 1, word


def test_pipes_get_the_answer_and_nothing_else(dropping: FakeCoderServer) -> None:
    result = subprocess.run(
        [*CLI, "run", "think about it"],
        env=_env(dropping),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ANSWER + "\n"
    for word in ("connecting", "redialing", "streaming", "done in", "\x1b", "\r"):
        assert word not in result.stderr
    assert result.stderr.splitlines()[0] == "(thinking) Let me weigh this carefully."
    assert result.stderr.splitlines()[1].startswith("chat_id=")
    assert dropping.counters.requests["stream_chat"] == 2


def test_coder_agent_log_prints_the_library_records_from_that_level(
    dropping: FakeCoderServer,
) -> None:
    """The library's WARNING for a redial is not printed unless CODER_AGENT_LOG asks for it
    (the command reports a lost stream itself on a terminal)."""
    result = subprocess.run(
        [*CLI, "run", "think about it"],
        env={**_env(dropping), "CODER_AGENT_LOG": "warning"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ANSWER + "\n"
    (line,) = [text for text in result.stderr.splitlines() if "redialing" in text]
    assert "WARNING coder_proto: " in line and "(1/5 failures in a row)" in line
    assert dropping.token not in result.stderr


def test_waiting_for_a_client_tool_shows_on_the_terminal(tmp_path: Path) -> None:
    tools = tmp_path / "slow_tools.py"
    tools.write_text(
        "import time\n"
        "def get_weather(city: str) -> str:\n"
        '    """The weather in a city."""\n'
        "    time.sleep(0.5)\n"
        '    return "sunny"\n'
        "TOOLS = {'get_weather': get_weather}\n"
    )
    with Terminal("chat", "--fake", "--tools", str(tools), env=environment()) as term:
        term.expect("> ")
        term.type("What is the weather in Paris?")
        term.expect("waiting for the tool get_weather")
        term.expect("get_weather returned")
        term.expect("> ")
        term.ctrl_d()
        assert term.wait() == 0


def test_a_run_queued_behind_another_says_so_on_the_terminal() -> None:
    import threading

    from coder_io_sync import CoderAgent

    with FakeCoderServer(chunk_delay=0.03) as server:
        first = CoderAgent(
            base_url=server.url, token=server.token, organization_id=server.organization_id
        )
        first.generate("hello there")
        chat_id = first.chat_id
        assert chat_id is not None
        busy = threading.Thread(target=first.generate, args=(" ".join(["busy"] * 150),))
        busy.start()
        try:
            deadline = time.monotonic() + 30
            while server.model.chats[chat_id].status != "running":
                assert time.monotonic() < deadline
                time.sleep(0.02)
            cursor = max(m.id for m in server.model.chats[chat_id].messages)
            argv = ("run", "--chat-id", chat_id, "--last-seen-message-id", str(cursor), "next")
            with Terminal(*argv, env=_env(server)) as term:
                term.expect("queued behind another run (1 in the queue)")
                term.expect("You said: next")
                assert term.wait() == 0
        finally:
            busy.join(60)
            first.close(archive=False)
