"""``llm``'s own command line on the fake Coder server: ``llm -m coder``, ``llm -c``,
``llm chat``, options, tools, Ctrl-C, and the exchange in ``llm``'s log.

``llm`` finds the plugin the way it finds any: through the ``llm`` entry points of the
distributions on its path. The tests run on a source tree that no installation describes, so
they put a distribution's metadata holding this project's ``llm`` entry points (read from
``pyproject.toml``) on ``llm``'s path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import CallClientTool, Say, Script, Wait

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0) as server:
        yield server


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the metadata of a distribution with the project's ``llm`` entry
    points, as an installation would write it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    path = tmp_path_factory.mktemp("plugins")
    info = path / "coder_agents_llm_entry_points-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: coder-agents-llm-entry-points\nVersion: 0\n"
    )
    lines = [f"{name} = {value}" for name, value in project["entry-points"]["llm"].items()]
    (info / "entry_points.txt").write_text("[llm]\n" + "\n".join(lines) + "\n")
    return path


def _env(server: FakeCoderServer, home: Path, plugins: Path, token: str | None) -> dict[str, str]:
    names = ("CODER_URL", "CODER_SESSION_TOKEN", "CODER_ORGANIZATION_ID", "CODER_ORG_ID")
    env = {k: v for k, v in os.environ.items() if k not in names and k != "LLM_LOAD_PLUGINS"}
    path = [str(plugins), str(ROOT), env.get("PYTHONPATH", "")]
    env.update(
        CODER_URL=server.url,
        CODER_SESSION_TOKEN=server.token if token is None else token,
        CODER_ORG_ID=server.organization_id,
        LLM_USER_PATH=str(home),
        PYTHONPATH=os.pathsep.join(filter(None, path)),
        PYTHONUNBUFFERED="1",
    )
    return env


def _llm(
    server: FakeCoderServer,
    home: Path,
    plugins: Path,
    *argv: str,
    stdin: str = "",
    token: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs ``llm`` with its configuration and log in ``home``."""
    return subprocess.run(
        [sys.executable, "-m", "llm", *argv],
        input=stdin,
        env=_env(server, home, plugins, token),
        cwd=home,
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


def test_llm_finds_the_coder_model_through_the_entry_point(
    server: FakeCoderServer, tmp_path: Path, plugins: Path
) -> None:
    listed = _llm(server, tmp_path, plugins, "models", "--options", "-m", "coder")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("Coder agent: coder")
    assert "request_timeout: float" in listed.stdout


def test_llm_c_continues_the_chat_and_the_log_holds_the_exchange(
    server: FakeCoderServer, tmp_path: Path, plugins: Path
) -> None:
    first = _llm(
        server,
        tmp_path,
        plugins,
        "-m",
        "coder",
        "-s",
        "Be brief.",
        "-o",
        "plan_mode",
        "plan",
        "hello",
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("Hello!")
    second = _llm(server, tmp_path, plugins, "-c", "say more")
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith("You said: say more")

    (chat_id,) = server.model.chats
    chat = server.model.chat(chat_id)
    assert _user_texts(server, chat_id) == ["hello", "say more"]
    assert "Be brief." in (chat.system_prompt or "")
    assert chat.plan_mode == "plan"
    shown = _llm(server, tmp_path, plugins, "logs", "--json", "-n", "0")
    logged = json.loads(shown.stdout)
    assert [row["prompt"] for row in logged] == ["hello", "say more"]
    assert logged[1]["response"].startswith("You said: say more")
    assert logged[0]["conversation_id"] == logged[1]["conversation_id"]
    # The chat's reasoning is logged as reasoning; the part that keeps the chat adds none.
    assert [row["reasoning"] or "" for row in logged] == [
        "",
        "The user said something; I will echo it.",
    ]
    for row in logged:
        assert row["model"] == "coder"
        assert row["response_json"]["coder"]["chat_id"] == chat_id
        assert row["input_tokens"] > 0
        assert row["output_tokens"] > 0


def test_llm_chat_keeps_one_chat_across_its_prompts(
    server: FakeCoderServer, tmp_path: Path, plugins: Path
) -> None:
    done = _llm(server, tmp_path, plugins, "chat", "-m", "coder", stdin="hello\nsay more\nquit\n")
    assert done.returncode == 0, done.stderr
    assert "Hello!" in done.stdout
    assert "You said: say more" in done.stdout
    (chat_id,) = server.model.chats
    assert _user_texts(server, chat_id) == ["hello", "say more"]
    assert not server.model.chat(chat_id).archived


def test_functions_run_as_client_tools(
    server: FakeCoderServer, tmp_path: Path, plugins: Path
) -> None:
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
    done = _llm(
        server, tmp_path, plugins, "-m", "coder", "--functions", functions, "Weather in Paris?"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Paris: 21 degrees."


def test_a_rejected_token_is_an_error_line_without_the_token(
    server: FakeCoderServer, tmp_path: Path, plugins: Path
) -> None:
    done = _llm(server, tmp_path, plugins, "-m", "coder", "hello", token="not-the-token")
    assert done.returncode == 1
    assert done.stderr.startswith("Error:")
    assert "not-the-token" not in done.stdout + done.stderr
    assert server.model.chats == {}


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
def test_ctrl_c_interrupts_the_run_and_leaves_the_chat_in_place(
    server: FakeCoderServer, tmp_path: Path, plugins: Path
) -> None:
    server.config.scripts.push(Script([Say("Thinking it over."), Wait(60), Say("Too late.")]))
    child = subprocess.Popen(
        [sys.executable, "-m", "llm", "-m", "coder", "Take your time."],
        env=_env(server, tmp_path, plugins, None),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        # The first words are out: the run is under way on the server.
        assert child.stdout.read(len("Thinking")) == "Thinking"
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode != 0
    assert "Too late." not in out
    (chat_id,) = server.model.chats
    # The interrupt is sent in the background and awaited as the plugin closes its agent.
    deadline = time.monotonic() + 30
    while server.model.chat(chat_id).status == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not server.model.chat(chat_id).archived
