"""Examples that must run as written: the README's first durable-workflow example against the
fake server (its prompt makes the fake's model call the tool it shows), and the script book of
docs/fake-server.md driving ``coder-agent chat`` as that page shows."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

from coder_integrations.fake_server import FakeCoderServer

from .terminal import CLI, environment

README = Path(__file__).resolve().parents[2] / "README.md"


def _durable_example() -> str:
    text = README.read_text()
    section = text[text.index("## Durable workflows") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1)


def test_the_durable_example_runs_as_written_on_the_fake(tmp_path: Path) -> None:
    script = tmp_path / "durable_example.py"
    script.write_text(_durable_example())
    with FakeCoderServer(chunk_delay=0.001) as server:
        env = environment(
            CODER_URL=server.url,
            CODER_SESSION_TOKEN=server.token,
            CODER_ORGANIZATION_ID=server.organization_id,
        )
        result = subprocess.run(
            [sys.executable, str(script)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        assert "charged 500 cents: receipt 1" in result.stdout
        ((chat_id, chat),) = server.model.chats.items()
        calls = [
            part
            for message in chat.messages
            for part in message.content
            if part.get("type") == "tool-call"
        ]
        assert len(calls) == 1, calls
        assert calls[0]["tool_name"] == "charge_card"
        args = calls[0]["args"]
        assert (json.loads(args) if isinstance(args, str) else args) == {"amount_cents": 500}
        assert chat.archived, chat_id


def _doc_block(page: str, heading: str, language: str, index: int = 0) -> str:
    text = (README.parent / "docs" / page).read_text()
    section = text[text.index(heading) :]
    blocks = re.findall(rf"```{language}\n(.*?)```", section, re.S)
    return str(blocks[index])


def test_the_script_book_drives_coder_agent_chat_as_documented(tmp_path: Path) -> None:
    heading = "### A script book in JSON"
    (tmp_path / "book.json").write_text(_doc_block("fake-server.md", heading, "json"))
    tools = _doc_block("fake-server.md", "The same book from the command line", "python")
    (tmp_path / "forecast_tools.py").write_text(tools)
    server = subprocess.Popen(
        [*CLI, "fake-server", "--scripts", "book.json", "--chunk-delay", "0"],
        cwd=tmp_path,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()
        values = dict(server.stdout.readline().strip().partition("=")[::2] for _ in range(4))
        chat = subprocess.run(
            [*CLI, "chat", "--tools", "forecast_tools.py"],
            cwd=tmp_path,
            env=environment(**values),
            input="What is the weather in Paris for 3 days?\nflaky\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
    assert chat.returncode == 0, chat.stderr
    shown = _doc_block("fake-server.md", "The same book from the command line", "text")
    expected = [line for line in shown.splitlines() if not line.startswith(">")]
    assert chat.stdout.splitlines() == expected
