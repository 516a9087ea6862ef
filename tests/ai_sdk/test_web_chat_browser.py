"""The web chat example in a real headless Chromium (the OS package): the page's own
``useChat`` sends a prompt to the example's FastAPI backend, which runs it as an agent turn on
the fake Coder server; the streamed answer and the tool call must appear on the page. The
page also recovers from a failed turn, stops a running one with its Stop button, and a second
tab on the same chat picks up the turn in flight. The screenshots are kept in
``examples/web_chat/screenshots/`` (or ``$CODER_ARTIFACTS_DIR``).

A missing browser or Node.js fails the test (CI installs them: ``.ci/run``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from coder_proto.fake import Say, Script, Wait
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
    # The answer is in words, not the tool's JSON.
    assert shown["text"] == "Right now it is 21 °C in Berlin, and the sky is clear. Enjoy your day!"
    assert shown["usage"].endswith("out tokens")
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The backend kept the chat for the page's next message.
    [chat] = fake.model.chats.values()
    sessions = app.state.bridge.sessions
    assert len(sessions) == 1
    assert not chat.archived


def run_flow(url: str, flow: str) -> dict[str, Any]:
    screenshot = artifact_dir() / f"web_chat_{flow}.png"
    screenshot.unlink(missing_ok=True)
    done = subprocess.run(
        ["node", str(web_chat.HERE / "browser_flows.mjs"), url, flow, str(screenshot)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "CHROMIUM_PATH": CHROMIUM},
    )
    assert done.returncode == 0, f"the browser run failed:\n{done.stdout}\n{done.stderr}"
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shown: dict[str, Any] = json.loads(done.stdout)
    assert shown["consoleErrors"] == []
    return shown


def test_the_page_shows_a_failed_turn_and_takes_the_next_prompt(
    running_app: tuple[str, Any, Any],
) -> None:
    url, _app, fake = running_app
    fake.faults.fail_requests("create_chat", 400, message="Model config is disabled.")
    shown = run_flow(url, "error")
    failed = shown["failed"]
    # The reason in words, no empty assistant bubble, and Send ready for the next prompt.
    assert failed["error"] == "Model config is disabled."
    assert failed["bubbles"] == [{"role": "user", "text": "What is the weather in Oslo?"}]
    assert failed["send"] and not failed["stop"]
    recovered = shown["recovered"]
    assert recovered["error"] is None
    assert recovered["status"] == "ready"
    assert recovered["bubbles"][-1] == {
        "role": "assistant",
        "text": "Right now it is 21 °C in Rome, and the sky is clear. Enjoy your day!",
    }


def test_the_stop_button_interrupts_the_run(running_app: tuple[str, Any, Any]) -> None:
    url, _app, fake = running_app
    fake.config.scripts.add(
        r"slow story", Script([Say("Once upon a time."), Wait(30), Say("never")])
    )
    shown = run_flow(url, "stop")
    assert shown["running"]["stop"] and not shown["running"]["send"]
    stopped = shown["stopped"]
    assert stopped["send"] and not stopped["stop"]
    assert stopped["error"] is None
    assert stopped["bubbles"][-1] == {"role": "assistant", "text": "Once upon a time."}
    assert wait_for(lambda: [r for r in fake.counters.request_log if r.op == "interrupt_chat"])
    [chat] = fake.model.chats.values()
    assert not chat.archived


def test_a_second_tab_on_the_chat_resumes_the_turn_in_flight(
    running_app: tuple[str, Any, Any],
) -> None:
    url, _app, fake = running_app
    fake.config.scripts.add(
        r"slow story", Script([Say("Once upon a time."), Wait(2), Say(" The end.")])
    )
    shown = run_flow(url, "resume")
    assert "?chat=" in shown["address"]
    resumed = shown["resumed"]
    assert resumed["bubbles"] == [{"role": "assistant", "text": "Once upon a time."}]
    assert resumed["stop"]
    story = {"role": "assistant", "text": "Once upon a time. The end."}
    assert shown["finished"]["bubbles"] == [story]
    assert shown["finished"]["status"] == "ready"
    assert shown["first"]["bubbles"] == [{"role": "user", "text": "Tell me a slow story"}, story]
    assert len(fake.model.chats) == 1


def prompts_of(fake: Any) -> list[str]:
    """The prompts of the fake's one chat as Coder lists them, newest first."""
    import coder_io_sync

    [chat] = fake.model.chats.values()
    with coder_io_sync.CoderChatClient(fake.url, fake.token) as client:
        return [p.text for p in client.get_chat_prompts(chat.id)]


OSLO = "Right now it is 21 °C in Oslo, and the sky is clear. Enjoy your day!"


def test_regenerate_replaces_the_answer_in_coder_too(running_app: tuple[str, Any, Any]) -> None:
    url, _app, fake = running_app
    shown = run_flow(url, "regenerate")
    asked = {"role": "user", "text": "What is the weather in Oslo?"}
    assert shown["answered"]["bubbles"] == [asked, {"role": "assistant", "text": OSLO}]
    assert shown["after"]["bubbles"] == [asked, {"role": "assistant", "text": OSLO}]
    assert shown["after"]["error"] is None
    # Coder's history holds the question once: the regenerate edited it, it did not append.
    assert prompts_of(fake) == ["What is the weather in Oslo?"]


def test_an_edited_message_replaces_the_coder_message(running_app: tuple[str, Any, Any]) -> None:
    url, _app, fake = running_app
    shown = run_flow(url, "edit")
    assert shown["editing"] == "What is the weather in Oslo?"
    assert shown["after"]["bubbles"] == [
        {"role": "user", "text": "What is the weather in Lima?"},
        {"role": "assistant",
         "text": "Right now it is 21 °C in Lima, and the sky is clear. Enjoy your day!"},
    ]
    assert shown["after"]["error"] is None
    assert prompts_of(fake) == ["What is the weather in Lima?"]


def wait_for(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.01)
