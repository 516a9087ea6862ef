"""How ``coder-agent`` ends, seen from a shell: every user mistake is one line on stderr and
exit status 2 with no traceback, and every way ``run`` ends (success, failure, Ctrl-C,
SIGTERM, the ``--timeout`` deadline, a lost network, a closed stdout) reports the chat id and
cursor and exits with the status documented in ``coder_integrations.cli.EXIT_CODES``. Each case
runs the real entry point in a subprocess against a fake server on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coder_integrations.cli import EXIT_CODES, build_parser
from coder_integrations.fake_server import FakeCoderServer

ENV = ("CODER_URL", "CODER_SESSION_TOKEN", "CODER_ORGANIZATION_ID", "CODER_ORG_ID")
#: Long enough that the run is still streaming when the test acts on it (one part per word).
LONG_PROMPT = " ".join(f"word{i}" for i in range(400))
CLI = [sys.executable, "-m", "coder_integrations.cli"]


def _env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    env.update(values)
    return env


def _cli(
    *argv: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *argv],
        env=_env() if env is None else env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def slow() -> Iterator[FakeCoderServer]:
    """A served fake that streams slowly: a long prompt takes seconds to echo."""
    with FakeCoderServer(chunk_delay=0.05) as server:
        yield server


def _slow_env(server: FakeCoderServer) -> dict[str, str]:
    return _env(
        CODER_URL=server.url,
        CODER_SESSION_TOKEN=server.token,
        CODER_ORGANIZATION_ID=server.organization_id,
    )


def _resume(err: str) -> dict[str, str]:
    line = next(x for x in err.splitlines() if x.startswith("chat_id="))
    return dict(item.split("=") for item in line.split())


# -- user mistakes ---------------------------------------------------------------------------------


def _assert_one_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    # argparse's own errors come after its usage lines; ours are the only line.
    last = result.stderr.strip().splitlines()[-1]
    if not last.startswith("coder-agent run: error:"):
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in needles:
        assert needle in last


def test_record_into_a_missing_folder(tmp_path: Path) -> None:
    target = tmp_path / "nowhere" / "x.jsonl"
    _assert_one_line(_cli("run", "--fake", "--record", str(target), "hi"), f"--record {target}")


def test_record_onto_a_directory(tmp_path: Path) -> None:
    _assert_one_line(
        _cli("run", "--fake", "--record", str(tmp_path), "hi"), "is a directory", "--record"
    )


def test_record_refuses_an_existing_file_unless_forced(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.write_text("keep me\n")
    _assert_one_line(_cli("run", "--fake", "--record", str(target), "hi"), "--force")
    assert target.read_text() == "keep me\n"
    forced = _cli("run", "--fake", "--record", str(target), "--overwrite", "hi")
    assert forced.returncode == 0, forced.stderr
    assert '"coder-agents-transcript"' in target.read_text()


@pytest.mark.parametrize("value", ["-1", "nan", "soon"])
def test_timeout_takes_seconds_zero_or_more(value: str) -> None:
    _assert_one_line(_cli("run", "--fake", "--timeout", value, "hi"), "--timeout", repr(value))


def test_fake_server_chunk_delay_takes_seconds_zero_or_more() -> None:
    result = _cli("fake-server", "--chunk-delay", "-1")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--chunk-delay" in result.stderr


def test_a_cursor_needs_a_chat_id() -> None:
    _assert_one_line(
        _cli("run", "--fake", "--last-seen-message-id", "3", "hi"),
        "--last-seen-message-id needs --chat-id",
    )


def test_missing_deployment_names_the_flag_and_the_variable() -> None:
    _assert_one_line(_cli("run", "hi"), "--url", "CODER_URL")
    _assert_one_line(_cli("run", "--url", "http://127.0.0.1:9", "hi"), "--token")


def test_a_url_that_is_not_a_deployment_names_the_flag_or_the_variable() -> None:
    flag = _cli("run", "--url", "notaurl", "--token", "t", "hi")
    _assert_one_line(flag, "--url notaurl: not a deployment URL", "https://")
    variable = _cli("models", env=_env(CODER_URL="ftp://x", CODER_SESSION_TOKEN="t"))
    assert variable.returncode == 2 and "Traceback" not in variable.stderr
    assert variable.stderr.strip() == (
        "coder-agent models: CODER_URL=ftp://x: not a deployment URL; give http:// or "
        "https:// and a host, as in https://coder.example.com"
    )
    # The library's own names (base_url=) do not reach the user.
    assert "base_url" not in flag.stderr + variable.stderr


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["chat", "--fake", "--last-seen-message-id", "3"], "needs --chat-id"),
        (["chat", "--fake", "--timeout", "-1"], "--timeout"),
        (["chat"], "CODER_URL"),
        (["chats", "watch", "--timeout", "-5"], "--timeout"),
        (["chats", "list", "--limit", "0"], "--limit"),
        (["run", "--fake", "--last-seen-message-id", "-3", "hi"], "--last-seen-message-id"),
    ],
)
def test_mistakes_in_chat_and_chats_are_one_line(argv: list[str], needle: str) -> None:
    result = _cli(*argv, stdin="")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and needle in result.stderr.strip().splitlines()[-1]


def test_replay_of_a_binary_file(tmp_path: Path) -> None:
    binary = tmp_path / "blob.jsonl"
    binary.write_bytes(bytes(range(256)) * 4)
    _assert_one_line(_cli("replay", str(binary)), "is not a transcript")


def test_replay_of_a_file_that_is_not_a_transcript(tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_text('{"a": 1}\n')
    _assert_one_line(_cli("replay", str(other)), str(other), "is not a transcript")
    _assert_one_line(_cli("replay", str(tmp_path / "missing.jsonl")), "cannot read")


def test_replay_exits_non_zero_on_a_transcript_that_diverged(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    recorded = _cli("run", "--fake", "--record", str(target), "say hi")
    assert recorded.returncode == 0, recorded.stderr
    faithful = _cli("replay", str(target))
    assert faithful.returncode == 0 and "matches the recording: yes" in faithful.stdout
    text = target.read_text()
    assert text.count("You said: say hi") >= 1
    target.write_text(text.replace('"text":"You said: say hi"', '"text":"You said: bye"'))
    diverged = _cli("replay", str(target))
    assert diverged.returncode == 1, diverged.stdout + diverged.stderr
    assert "matches the recording: NO" in diverged.stdout
    assert "did not replay as recorded" in diverged.stderr


# -- how a run ends --------------------------------------------------------------------------------


def test_the_exit_codes_are_documented() -> None:
    help_text = build_parser().format_help()
    run_help = _cli("run", "--help").stdout
    for code, meaning in EXIT_CODES.items():
        assert f"  {code:<4} {meaning}" in help_text and f"  {code:<4} {meaning}" in run_help
    assert set(EXIT_CODES) == {0, 1, 2, 3, 4, 130, 141, 143}


def _start(server: FakeCoderServer, *flags: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*CLI, "run", *flags, LONG_PROMPT],
        env=_slow_env(server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_streaming(server: FakeCoderServer, process: subprocess.Popen[bytes]) -> None:
    """Block until the run is under way: text arrived, or (under --json) a chat exists."""
    assert process.stdout is not None
    process.stdout.read(3)


@pytest.mark.parametrize(
    ("sig", "code", "word"),
    [(signal.SIGINT, 130, "stopped by Ctrl-C"), (signal.SIGTERM, 143, "terminated by SIGTERM")],
)
def test_a_signal_interrupts_the_run_and_prints_how_to_continue(
    slow: FakeCoderServer, sig: int, code: int, word: str
) -> None:
    process = _start(slow)
    _wait_streaming(slow, process)
    process.send_signal(sig)
    _, err_bytes = process.communicate(timeout=60)
    err = err_bytes.decode()
    assert process.returncode == code, err
    assert "Traceback" not in err and f"coder-agent run: {word}" in err
    fields = _resume(err)
    (chat_id,) = slow.model.chats
    assert fields["chat_id"] == chat_id and fields["last_seen_message_id"] != "None"
    assert slow.counters.requests["interrupt_chat"] == 1
    assert not slow.model.chats[chat_id].archived


def test_sigterm_under_json_prints_one_object_with_the_chat(slow: FakeCoderServer) -> None:
    process = _start(slow, "--json")
    deadline = time.monotonic() + 30
    while not any(chat.messages for chat in slow.model.chats.values()):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 143, err.decode()
    body = json.loads(out)
    (chat_id,) = slow.model.chats
    assert body["chat_id"] == chat_id and body["error_kind"] == "terminated"
    assert isinstance(body["last_seen_message_id"], int) and body["exit_code"] == 143
    assert slow.counters.requests["interrupt_chat"] == 1


def test_a_closed_stdout_ends_quietly_and_interrupts_the_run(slow: FakeCoderServer) -> None:
    process = _start(slow)
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.read(3) == b"You"
    process.stdout.close()  # as `| head -c 3` does
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert "stdout was closed" in err
    assert _resume(err)["chat_id"] in slow.model.chats
    assert slow.counters.requests["interrupt_chat"] == 1


@pytest.mark.parametrize("json_mode", [False, True])
def test_the_timeout_deadline_exits_4_with_the_chat(slow: FakeCoderServer, json_mode: bool) -> None:
    flags = ["--timeout", "0.5"] + (["--json"] if json_mode else [])
    process = _start(slow, *flags)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 4, err.decode()
    (chat_id,) = slow.model.chats
    if json_mode:
        body = json.loads(out)
        assert body["error_kind"] == "timeout" and body["chat_id"] == chat_id
    else:
        assert "--timeout deadline passed" in err.decode()
        assert _resume(err.decode())["chat_id"] == chat_id
    assert slow.counters.requests["interrupt_chat"] == 1


def test_an_unreachable_deployment_exits_3() -> None:
    flags = ["--url", "http://127.0.0.1:9", "--token", "t", "--organization-id", "o"]
    text = _cli("run", *flags, "hi")
    assert text.returncode == 3 and "Traceback" not in text.stderr
    assert "cannot reach the Coder deployment at http://127.0.0.1:9" in text.stderr
    assert "no chat was created" in text.stderr
    as_json = _cli("run", "--json", *flags, "hi")
    assert as_json.returncode == 3
    body = json.loads(as_json.stdout)
    assert body["error_kind"] == "network" and body["chat_id"] is None


def test_a_failed_run_under_json_carries_the_error(slow: FakeCoderServer) -> None:
    from coder_proto.fake import Fail, Script

    slow.config.scripts.add("doomed", Script((Fail(message="model unavailable"),)))
    result = _cli("run", "--json", "doomed prompt", env=_slow_env(slow))
    assert result.returncode == 1
    body = json.loads(result.stdout)
    assert "model unavailable" in body["error"] and body["chat_id"] in slow.model.chats


# -- the deployment and the prompt -----------------------------------------------------------------


def test_version() -> None:
    from coder_proto import __version__

    result = _cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"coder-agent {__version__}"


def test_flags_and_coder_org_id_stand_in_for_the_environment(slow: FakeCoderServer) -> None:
    env = _env(CODER_ORG_ID=slow.organization_id)
    flags = ["--url", slow.url, "--token", slow.token]
    result = _cli("run", *flags, "-", env=env, stdin="remember the number 7\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "You said: remember the number 7\n"
    (chat,) = slow.model.chats.values()
    assert chat.organization_id == slow.organization_id
    assert slow.token not in result.stdout + result.stderr


def test_an_empty_prompt_on_stdin_is_a_usage_error() -> None:
    _assert_one_line(_cli("run", "--fake", "-", stdin="\n"), "stdin")


# -- models and chats ------------------------------------------------------------------------------


def test_models_lists_the_catalog_with_the_default_marked(slow: FakeCoderServer) -> None:
    env = _env(
        CODER_URL=slow.url, CODER_SESSION_TOKEN=slow.token, CODER_ORG_ID=slow.organization_id
    )
    text = _cli("models", env=env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    default = [line for line in lines if line.startswith("* ")]
    assert len(default) == 1 and "anthropic:claude-sonnet-4-6" in default[0]
    assert any("[disabled]" in line for line in lines)
    rows = json.loads(_cli("models", "--json", env=env).stdout)
    assert [r["id"] for r in rows] == [
        line.split()[1] if line.startswith("*") else line.split()[0] for line in lines
    ]
    assert sum(r["is_default"] for r in rows) == 1
    no_org = _cli("models", env=_env(CODER_URL=slow.url, CODER_SESSION_TOKEN=slow.token))
    _assert_one_line(no_org, "--organization-id")


def test_chats_list_show_and_archive(slow: FakeCoderServer) -> None:
    env = _slow_env(slow)
    assert _cli("run", "search for otters", env=env).returncode == 0
    (chat_id,) = slow.model.chats
    listing = _cli("chats", "list", env=env)
    assert listing.returncode == 0 and listing.stdout.split()[:2] == [chat_id, "waiting"]
    show = _cli("chats", "show", chat_id, env=env)
    assert show.returncode == 0, show.stderr
    assert show.stdout.splitlines()[:2] == ["[3] user:", "  search for otters"]
    assert '  [tool call] web_search({"query": "search for otters"})' in show.stdout
    assert show.stdout.rstrip().endswith("I found one result: https://example.com/")
    history = json.loads(_cli("chats", "show", "--json", chat_id, env=env).stdout)
    assert [m["role"] for m in history] == ["user", "assistant", "assistant"]
    idle = _cli("chats", "interrupt", chat_id, env=env)
    assert idle.returncode == 1 and "has no running turn to interrupt" in idle.stderr
    archived = _cli("chats", "archive", chat_id, env=env)
    assert archived.returncode == 0 and slow.model.chats[chat_id].archived
    assert json.loads(_cli("chats", "list", "--json", env=env).stdout) == []
    unknown = _cli("chats", "show", "not-a-chat", env=env)
    assert unknown.returncode == 1 and "Traceback" not in unknown.stderr


def test_chats_interrupt_stops_a_running_turn(slow: FakeCoderServer) -> None:
    process = _start(slow)
    _wait_streaming(slow, process)
    (chat_id,) = slow.model.chats
    stopped = _cli("chats", "interrupt", chat_id, env=_slow_env(slow))
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith(f"interrupted {chat_id}")
    out, err = process.communicate(timeout=60)
    # The run ended early, on the server's word: its text stops short of the whole echo, and
    # the report still tells how to continue the chat.
    assert process.returncode == 0, err.decode()
    assert b"word399" not in out and _resume(err.decode())["chat_id"] == chat_id
    assert slow.counters.requests["interrupt_chat"] == 1
