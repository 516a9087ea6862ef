"""The web chat example in a real headless Chromium (the OS package): the page's own
``useChat`` sends a prompt to the example's FastAPI backend, which runs it as an agent turn on
the fake Coder server; the streamed answer and the tool call must appear on the page. The
screenshot is kept in ``examples/web_chat/screenshots/`` (or ``$CODER_ARTIFACTS_DIR``).

A missing browser or Node.js fails the test (CI installs them: ``.ci/run``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from examples.web_chat import app as web_chat

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


def artifact_dir() -> Path:
    base = os.environ.get("CODER_ARTIFACTS_DIR")
    path = Path(base) if base else web_chat.HERE / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def page_built() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("the browser test needs Node.js and npm", pytrace=False)
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"no Chromium at {CHROMIUM}: install the OS package (apt-get install chromium) "
            "or set CHROMIUM_PATH",
            pytrace=False,
        )
    try:
        return web_chat.build_page()
    except (subprocess.CalledProcessError, RuntimeError) as exc:
        pytest.fail(f"the example page could not be built: {exc}", pytrace=False)


@pytest.fixture
def running_app(page_built: Path) -> Iterator[tuple[str, Any, Any]]:
    fake = web_chat.start_fake()
    try:
        app = web_chat.create_app(
            {"base_url": fake.url, "token": fake.token, "organization_id": fake.organization_id}
        )
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            for _ in range(1000):
                if server.started:
                    break
                thread.join(0.01)
            assert server.started, "the example app did not start"
            port = server.servers[0].sockets[0].getsockname()[1]
            yield f"http://127.0.0.1:{port}/", app, fake
        finally:
            server.should_exit = True
            thread.join(10)
    finally:
        fake.stop()


def test_a_prompt_streams_its_answer_and_tool_call_onto_the_page(
    running_app: tuple[str, Any, Any],
) -> None:
    url, app, fake = running_app
    screenshot = artifact_dir() / "web_chat.png"
    screenshot.unlink(missing_ok=True)
    done = subprocess.run(
        ["node", str(web_chat.HERE / "browser_check.mjs"), url,
         "What is the weather in Berlin?", str(screenshot)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CHROMIUM_PATH": CHROMIUM},
    )
    assert done.returncode == 0, f"the browser run failed:\n{done.stdout}\n{done.stderr}"
    shown = json.loads(done.stdout)
    assert shown["consoleErrors"] == []
    assert shown["error"] is None
    assert shown["user"] == "What is the weather in Berlin?"
    assert shown["reasoning"] == "The user asks about Berlin; let me check the forecast."
    assert shown["tool"] == {
        "name": "get_weather",
        "state": "output-available",
        "input": {"city": "Berlin"},
        "output": {"city": "Berlin", "temp_c": 21, "sky": "clear"},
    }
    assert shown["text"] == (
        'Right now in Berlin: {"city":"Berlin","temp_c":21,"sky":"clear"}. Enjoy your day!'
    )
    assert shown["usage"].endswith("out tokens")
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The backend kept the chat for the page's next message.
    [chat] = fake.model.chats.values()
    sessions = app.state.bridge.sessions
    assert len(sessions) == 1
    assert not chat.archived
