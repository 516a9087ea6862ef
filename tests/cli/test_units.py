"""The command line's parts in process: the tools loader's refusals, the progress line's
states, the watch's lines, and the operations' less common answers (an empty catalog, no
chats, JSON for interrupt and archive, an unreachable deployment, replay's other outputs)."""

from __future__ import annotations

import io
import json
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from coder_integrations._cli.screen import Printer, Progress, is_terminal
from coder_integrations._cli.tools import ToolsError, load_tools
from coder_integrations._cli.watch import _line
from coder_integrations.cli import main
from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync import CoderAgent
from coder_proto import tool
from coder_proto.fake import CallClientTool, Say, Script

ENV = ("CODER_URL", "CODER_SESSION_TOKEN", "CODER_ORGANIZATION_ID", "CODER_ORG_ID")


@pytest.fixture(params=[False])
def deployment(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[FakeCoderServer]:
    settings = {"models": ()} if request.param else {}
    with FakeCoderServer(chunk_delay=0.0005, **settings) as server:
        monkeypatch.setenv("CODER_URL", server.url)
        monkeypatch.setenv("CODER_SESSION_TOKEN", server.token)
        monkeypatch.setenv("CODER_ORGANIZATION_ID", server.organization_id)
        yield server


# -- --tools -------------------------------------------------------------------------------------


def test_tools_modules_that_fail_or_clash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "broken_file.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "broken_module.py").write_text("import not_installed_anywhere\n")
    (tmp_path / "odd_module.py").write_text("raise RuntimeError('odd')\n")
    (tmp_path / "not_tools.py").write_text("TOOLS = [42]\n")
    (tmp_path / "one.py").write_text(
        "from coder_proto import tool\n"
        "@tool\n"
        "def ping() -> str:\n"
        '    """Ping."""\n'
        "    return 'pong'\n"
        "TOOLS = [ping]\n"
    )
    cases = {
        str(tmp_path / "broken_file.py"): "importing it failed: RuntimeError: boom",
        "broken_module": "importing it failed: No module named 'not_installed_anywhere'",
        "odd_module": "importing it failed: RuntimeError: odd",
        "not_tools": "42 is not a tool",
    }
    for spec, message in cases.items():
        with pytest.raises(ToolsError, match=r"^--tools ") as caught:
            load_tools([spec])
        assert message in str(caught.value)
    assert list(load_tools(["one"])) == ["ping"]
    with pytest.raises(ToolsError, match="the tool 'ping' is defined twice"):
        load_tools(["one", str(tmp_path / "one.py")])


# -- the progress line ---------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_states_on_a_terminal() -> None:
    from coder_proto import ToolCall
    from coder_proto._wire.events import QueueUpdateEvent
    from coder_proto._wire.messages import ChatQueuedMessage

    err = _Tty()
    progress = Progress(err)
    assert progress.enabled
    progress.start()
    queued = ChatQueuedMessage.from_json(
        {"id": 1, "chat_id": "c", "content": [{"type": "text", "text": "x"}], "created_at": ""}
    )
    ws = types.SimpleNamespace
    progress(ws(type="ws:event", event=QueueUpdateEvent(queued_messages=(queued,))))
    progress(ws(type="ws:event", event=QueueUpdateEvent()))
    progress(ws(type="segment:start", segment=2))
    progress(ws(type="ws:dial", attempt=2))
    call = ToolCall(tool_call_id="t", tool_name="get_weather", input="{}")
    progress.part(call)
    progress.finished("done")
    shown = err.getvalue()
    for state in (
        "connecting ...",
        "queued behind another run (1 in the queue) ...",
        "waiting for the model ...",
        "continuing ...",
        "redialing ...",
        "waiting for the tool get_weather ...",
        "done in ",
    ):
        assert state in shown, shown


def test_progress_is_silent_off_a_terminal() -> None:
    err = io.StringIO()
    progress = Progress(err)
    progress.start()
    progress(types.SimpleNamespace(type="ws:redial"))
    progress.part(object())
    progress.note("x")
    progress.finished("done")
    assert err.getvalue() == ""
    closed = io.StringIO()
    closed.close()
    assert not is_terminal(closed)


def test_printer_ends_dim_reasoning_when_the_stream_ends() -> None:
    from coder_proto import ReasoningDelta

    out = _Tty()
    printer = Printer(out)
    printer.part(ReasoningDelta(id="r", delta="hmm"))
    printer.finish()
    assert out.getvalue() == "\x1b[2m(thinking) hmm\x1b[0m\n"


# -- chats watch, models, chats ------------------------------------------------------------------


def test_a_watch_line_names_the_tool_calls_a_chat_waits_for() -> None:
    chat = types.SimpleNamespace(id="c1", status="requires_action", title="t")
    call = types.SimpleNamespace(tool_name="get_weather")
    event = types.SimpleNamespace(kind="action_required", chat=chat, tool_calls=(call,))
    assert _line(event).endswith("[waiting for get_weather]")


@pytest.mark.parametrize("deployment", [True], indirect=True)
def test_an_empty_catalog_and_no_chats(
    deployment: FakeCoderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models"]) == 0
    assert capsys.readouterr().out == "no model configurations\n"
    assert main(["chats", "list"]) == 0
    assert capsys.readouterr().out == "no chats\n"


def test_interrupt_and_archive_under_json(
    deployment: FakeCoderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    @tool
    def slow_tool() -> str:
        """Never answers in time."""
        return "late"

    deployment.config.scripts.add(
        "pause", Script((CallClientTool(name="slow_tool", args={}), Say("after")))
    )
    agent = CoderAgent(
        base_url=deployment.url,
        token=deployment.token,
        organization_id=deployment.organization_id,
    )
    with agent:
        agent.generate("hello")
    (chat_id,) = deployment.model.chats
    assert main(["chats", "archive", "--json", chat_id]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["id"] == chat_id and deployment.model.chats[chat_id].archived

    # A chat paused on a client tool nobody answers can be interrupted.
    started = threading.Event()

    def block() -> str:
        started.set()
        threading.Event().wait(5)
        return "late"

    paused = CoderAgent(
        base_url=deployment.url,
        token=deployment.token,
        organization_id=deployment.organization_id,
        tools={"slow_tool": block},
    )
    runner = threading.Thread(target=lambda: _quietly(paused.generate, "pause here"))
    runner.start()
    assert started.wait(30)
    (other,) = [c for c in deployment.model.chats if c != chat_id]
    assert main(["chats", "interrupt", "--json", other]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["id"] == other
    runner.join(30)
    paused.close()


def _quietly(call: object, *args: object) -> None:
    try:
        call(*args)  # type: ignore[operator]
    except Exception:
        pass


def test_operations_on_an_unreachable_deployment_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    flags = ["--url", "http://127.0.0.1:9", "--token", "secret-token"]
    assert main(["chats", "list", *flags]) == 3
    err = capsys.readouterr().err
    assert err.startswith("coder-agent chats list: ") and "secret-token" not in err


def test_bad_numbers_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["run", "--fake", "--last-seen-message-id", "abc", "hi"],
        ["chats", "list", "--limit", "many"],
    ):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
        assert "Traceback" not in capsys.readouterr().err


# -- replay's other outputs ----------------------------------------------------------------------


def test_replay_json_parts_and_an_empty_transcript(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    target = tmp_path / "t.jsonl"
    assert main(["run", "--fake", "--record", str(target), "search for otters"]) == 0
    capsys.readouterr()
    assert main(["replay", "--parts", str(target)]) == 0
    out = capsys.readouterr().out
    assert "  tool call: web_search(" in out and '"type": "text-delta"' in out
    assert main(["replay", "--json", str(target)]) == 0
    assert json.loads(capsys.readouterr().out)["faithful"] is True
    header = target.read_text().splitlines()[0]
    empty = tmp_path / "empty.jsonl"
    empty.write_text(header + "\n")
    assert main(["replay", str(empty)]) == 0
    assert "no turns in this transcript" in capsys.readouterr().out


def test_version_flag_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0 and capsys.readouterr().out.startswith("coder-agent ")
    assert main([]) == 2
    assert sys.stdout is not None


# -- the stored coder login, the local log, the model check --------------------------------------


def test_the_coder_config_dir_on_each_platform(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from coder_integrations._cli.common import coder_config_dir

    monkeypatch.setenv("CODER_CONFIG_DIR", "~/elsewhere")
    assert coder_config_dir() == Path.home() / "elsewhere"
    monkeypatch.delenv("CODER_CONFIG_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert coder_config_dir() == tmp_path / "xdg" / "coderv2"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert coder_config_dir() == tmp_path / ".config" / "coderv2"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert coder_config_dir() == tmp_path / "Library" / "Application Support" / "coderv2"
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("APPDATA", str(tmp_path / "roaming"))
    assert coder_config_dir() == tmp_path / "roaming" / "coderv2"
    monkeypatch.delenv("APPDATA")
    assert coder_config_dir() == tmp_path / "AppData" / "Roaming" / "coderv2"


def test_the_log_skips_broken_lines_and_an_unwritable_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coder_integrations._cli import history

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    path = history.log_path()
    path.parent.mkdir(parents=True)
    good = {"chat_id": "c1", "time": "t", "deployment": "http://d/", "prompt": "p" * 300}
    path.write_text(
        "\n".join(
            [
                json.dumps({**good, "last_seen_message_id": 3}),
                '{"chat_id": "cut short',
                "[1, 2]",
                json.dumps({"deployment": "http://d"}),
                json.dumps({**good, "last_seen_message_id": "7"}),
                json.dumps({**good, "chat_id": "c2", "deployment": "http://other"}),
            ]
        )
        + "\n"
    )
    entries = history.chats()
    assert [(e.chat_id, e.sessions, e.last_seen_message_id) for e in entries] == [
        ("c1", 2, 3),
        ("c2", 1, None),
    ]
    assert history.latest("HTTP://D") is not None and history.latest("http://x") is None
    assert main(["log", "-n", "1", "--url", "http://d"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("c1  t  http://d/  ") and line.endswith("p\u2026")
    assert len(line.split("  ")[-1]) == 60
    # A log that cannot be written is skipped: the run already printed its chat id.
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocked))
    history.append(
        chat_id="c", deployment="http://d", prompt="p", last_seen_message_id=1, command="run"
    )
    assert history.chats() == []


def test_a_model_without_a_provider_is_suggested_by_its_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from coder_proto.fake import FakeModelSpec

    models = (FakeModelSpec(model="solo-model", display_name="Solo", provider=""),)
    with FakeCoderServer(chunk_delay=0.0005, models=models) as server:
        monkeypatch.setenv("CODER_URL", server.url)
        monkeypatch.setenv("CODER_SESSION_TOKEN", server.token)
        assert main(["run", "-m", "solo-modle", "hi"]) == 2
    assert "did you mean solo-model?" in capsys.readouterr().err
