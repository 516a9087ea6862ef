"""``coder-agent chats watch``: one line (or JSON object) per event of the watch stream of
the user's chats, until Ctrl-C (exit 130) or ``--timeout`` (exit 0)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync import CoderAgent

from .terminal import CLI, environment


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.001) as server:
        yield server


def _env(server: FakeCoderServer) -> dict[str, str]:
    return environment(
        CODER_URL=server.url,
        CODER_SESSION_TOKEN=server.token,
        CODER_ORGANIZATION_ID=server.organization_id,
    )


def _watch(server: FakeCoderServer, *flags: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*CLI, "chats", "watch", *flags],
        env=_env(server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while server.counters.requests["watch_chats"] == 0:
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)  # the socket is open once the upgrade was answered
    return process


def _one_turn(server: FakeCoderServer) -> str:
    with CoderAgent(
        base_url=server.url, token=server.token, organization_id=server.organization_id
    ) as agent:
        agent.generate("hello there")
        chat_id = agent.chat_id
    assert chat_id is not None
    return chat_id


def test_watch_prints_the_events_until_ctrl_c(server: FakeCoderServer) -> None:
    process = _watch(server)
    chat_id = _one_turn(server)
    assert process.stdout is not None
    lines: list[str] = []
    while not any(chat_id in line and line.split()[2] == "waiting" for line in lines):
        lines.append(process.stdout.readline())
        assert lines[-1], "".join(lines)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and "Traceback" not in err
    kinds = [line.split()[0] for line in lines if chat_id in line]
    assert kinds[0] == "created" and kinds[-1] == "status_change", lines


def test_watch_json_until_the_timeout(server: FakeCoderServer) -> None:
    process = _watch(server, "--json", "--timeout", "3")
    chat_id = _one_turn(server)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events and {e["chat_id"] for e in events} == {chat_id}
    assert events[0]["kind"] == "created"
    # The agent archives its chat as it closes: watchers see it go (deleted) after the turn.
    while events[-1]["kind"] == "deleted":
        events.pop()
    assert events[-1]["kind"] == "status_change" and events[-1]["status"] == "waiting"


def test_watch_times_out_quietly_with_no_events(server: FakeCoderServer) -> None:
    result = subprocess.run(
        [*CLI, "chats", "watch", "--timeout", "0.5"],
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr == f"watching the chats on {server.url} for 0.5 s\n"
