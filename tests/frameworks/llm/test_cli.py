"""``llm``'s own command line on the fake Coder server: ``llm -m coder``, ``llm -c``,
``llm chat``, options, tools, and the exchange in ``llm``'s log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from coder_io_common.fake_server import FakeCoderServer
from coder_proto.fake import CallClientTool, Say, Script

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0) as server:
        yield server


def _llm(
    server: FakeCoderServer, home: Path, *argv: str, stdin: str = "", token: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs ``llm`` with the plugin registered (tests/frameworks/llm/run_llm.py) and its
    configuration and log in ``home``."""
    names = ("CODER_URL", "CODER_SESSION_TOKEN", "CODER_ORGANIZATION_ID", "CODER_ORG_ID")
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(
        CODER_URL=server.url,
        CODER_SESSION_TOKEN=server.token if token is None else token,
        CODER_ORG_ID=server.organization_id,
        LLM_USER_PATH=str(home),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    return subprocess.run(
        [sys.executable, "-m", "tests.frameworks.llm.run_llm", *argv],
        input=stdin,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _user_texts(server: FakeCoderServer, chat_id: str) -> list[str]:
    return [
        block["text"]
        for message in server.model.chat(chat_id).messages
        if message.role == "user"
        for block in message.content
        if block.get("type") == "text"
    ]


def test_the_package_declares_the_llm_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["llm"] == {"coder": "coder_io_sync.integrations.llm"}
    assert any(req.startswith("llm>=") for req in project["optional-dependencies"]["llm"])


def test_llm_c_continues_the_chat_and_the_log_holds_the_exchange(
    server: FakeCoderServer, tmp_path: Path
) -> None:
    first = _llm(
        server, tmp_path, "-m", "coder", "-s", "Be brief.", "-o", "plan_mode", "plan", "hello"
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("Hello!")
    second = _llm(server, tmp_path, "-c", "say more")
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith("You said: say more")

    (chat_id,) = server.model.chats
    chat = server.model.chat(chat_id)
    assert _user_texts(server, chat_id) == ["hello", "say more"]
    assert "Be brief." in (chat.system_prompt or "")
    assert chat.plan_mode == "plan"
    shown = _llm(server, tmp_path, "logs", "--json", "-n", "0")
    logged = json.loads(shown.stdout)
    assert [row["prompt"] for row in logged] == ["hello", "say more"]
    assert logged[1]["response"].startswith("You said: say more")
    assert logged[0]["conversation_id"] == logged[1]["conversation_id"]
    for row in logged:
        assert row["model"] == "coder"
        assert row["response_json"]["coder"]["chat_id"] == chat_id
        assert row["input_tokens"] > 0
        assert row["output_tokens"] > 0


def test_llm_chat_keeps_one_chat_across_its_prompts(
    server: FakeCoderServer, tmp_path: Path
) -> None:
    done = _llm(server, tmp_path, "chat", "-m", "coder", stdin="hello\nsay more\nquit\n")
    assert done.returncode == 0, done.stderr
    assert "Hello!" in done.stdout
    assert "You said: say more" in done.stdout
    (chat_id,) = server.model.chats
    assert _user_texts(server, chat_id) == ["hello", "say more"]
    assert not server.model.chat(chat_id).archived


def test_functions_run_as_client_tools(server: FakeCoderServer, tmp_path: Path) -> None:
    server.config.scripts.push(
        Script(
            [
                CallClientTool(name="get_weather", args={"city": "Paris"}),
                Say("Paris: {tool_result.temp_c} degrees."),
            ]
        )
    )
    functions = (
        "def get_weather(city: str) -> dict:\n"
        '    """The weather in a city."""\n'
        '    return {"city": city, "temp_c": 21}\n'
    )
    done = _llm(server, tmp_path, "-m", "coder", "--functions", functions, "Weather in Paris?")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Paris: 21 degrees."


def test_a_rejected_token_is_an_error_line_without_the_token(
    server: FakeCoderServer, tmp_path: Path
) -> None:
    done = _llm(server, tmp_path, "-m", "coder", "hello", token="not-the-token")
    assert done.returncode == 1
    assert done.stderr.startswith("Error:")
    assert "not-the-token" not in done.stdout + done.stderr
    assert server.model.chats == {}
