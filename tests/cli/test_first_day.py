"""What a person meets on the first day with ``coder-agent``, each run as a program against a
served fake: a mistyped model, an unreachable deployment or a refused token, the login
``coder login`` stored, ``--continue`` and the local log, a piped prompt, tools on ``run``,
``--fake`` ends, ``demo``'s ends, argument mistakes, ``fake-server --env`` and Ctrl-C."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from coder_integrations.fake_server import FakeCoderServer

from .terminal import CLI, Terminal, environment


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.0005) as server:
        yield server


def _env(server: FakeCoderServer | None = None, **values: str) -> dict[str, str]:
    if server is None:
        return environment(**values)
    settings = {
        "CODER_URL": server.url,
        "CODER_SESSION_TOKEN": server.token,
        "CODER_ORGANIZATION_ID": server.organization_id,
    }
    return environment(**{**settings, **values})


def _cli(
    *argv: str, env: dict[str, str], stdin: str | None = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *argv], env=env, input=stdin, capture_output=True, text=True, timeout=120
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- --model -------------------------------------------------------------------------------------


def test_an_unknown_model_is_a_usage_error_that_lists_the_close_matches(
    server: FakeCoderServer,
) -> None:
    env = _env(server)
    typo = _cli("run", "-m", "gtp-5", "hi", env=env)
    assert typo.returncode == 2, typo.stderr
    assert typo.stderr.startswith("coder-agent run: --model gtp-5: no model of the deployment")
    assert "did you mean openai:gpt-5?" in typo.stderr
    assert "Traceback" not in typo.stderr and "chat_id=" not in typo.stderr
    far = _cli("chat", "--model", "zzzzzz", env=env, stdin="hi\n")
    assert far.returncode == 2
    assert "did you mean" not in far.stderr and "`coder-agent models` lists them" in far.stderr
    demo = _cli("demo", "--url", server.url, "--token", server.token, "-m", "gtp-5", env=env)
    assert demo.returncode == 2 and "coder-agent demo: --model gtp-5" in demo.stderr
    known = _cli("run", "-m", "gpt-5", "-s", "Be brief.", "hi", env=env)
    assert known.returncode == 0, known.stderr


# -- errors name the deployment and the fix ------------------------------------------------------


def test_an_unreachable_deployment_and_a_refused_token_say_where_and_what_to_do(
    server: FakeCoderServer,
) -> None:
    for url in (f"http://127.0.0.1:{_closed_port()}", "http://no-such-host.invalid"):
        env = environment(CODER_URL=url, CODER_SESSION_TOKEN="t", CODER_ORGANIZATION_ID="o")
        for argv in (["run", "hi"], ["models"], ["chats", "list"], ["demo"]):
            done = _cli(*argv, env=env)
            assert done.returncode == 3, (argv, done.stderr)
            first = done.stderr.splitlines()[0]
            command = "chats list" if argv[0] == "chats" else argv[0]
            assert first.startswith(f"coder-agent {command}: cannot reach the Coder deployment")
            assert url in first and "--url / CODER_URL" in first
    env = _env(server, CODER_SESSION_TOKEN="not-the-token")
    for argv in (["run", "hi"], ["models"], ["chats", "list"]):
        done = _cli(*argv, env=env)
        assert done.returncode == 1, (argv, done.stderr)
        assert f"the Coder deployment at {server.url} refused the session token" in done.stderr
        assert "CODER_SESSION_TOKEN" in done.stderr
        assert f"`coder login {server.url}`" in done.stderr
        assert "not-the-token" not in done.stderr


# -- the login `coder login` stored --------------------------------------------------------------


def test_the_stored_coder_login_is_used_when_no_variable_is_set(
    server: FakeCoderServer, tmp_path: Path
) -> None:
    config = tmp_path / "coderv2"
    config.mkdir()
    (config / "url").write_text(server.url + "\n")
    (config / "session").write_text(server.token + "\n")
    env = environment(CODER_CONFIG_DIR=str(config))
    done = _cli("run", "hi", env=env)
    assert done.returncode == 0, done.stderr
    assert "fake Coder agent" in done.stdout
    # The stored token belongs to the stored deployment: never sent to another URL.
    other = _cli("run", "--url", "http://127.0.0.1:1", "hi", env=env)
    assert other.returncode == 2
    assert other.stderr.splitlines()[0] == (
        "coder-agent run: no session token for http://127.0.0.1:1: pass --token TOKEN, set "
        "CODER_SESSION_TOKEN, or run `coder login http://127.0.0.1:1`"
    )
    (config / "url").write_text("coder.example.com")
    bad = _cli("run", "hi", env=env)
    assert bad.returncode == 2
    assert f"{config / 'url'} holds coder.example.com: not a deployment URL" in bad.stderr
    empty = _cli("run", "hi", env=environment(CODER_CONFIG_DIR=str(tmp_path / "none")))
    assert empty.returncode == 2 and "or run `coder login URL`" in empty.stderr


# -- --continue and the local log ----------------------------------------------------------------


def _chat_id(stderr: str) -> str:
    line = next(x for x in stderr.splitlines() if x.startswith("chat_id="))
    return line.split()[0].removeprefix("chat_id=")


def test_continue_takes_the_last_chat_of_the_deployment_from_the_log(
    server: FakeCoderServer,
) -> None:
    env = _env(server)
    nothing = _cli("run", "-c", "hi", env=env)
    assert nothing.returncode == 2
    assert "--continue: no earlier chat with " in nothing.stderr
    first = _cli("run", "what is a monad?", env=env)
    assert first.returncode == 0, first.stderr
    chat_id = _chat_id(first.stderr)
    again = _cli("run", "--continue", "and a functor?", env=env)
    assert again.returncode == 0, again.stderr
    assert _chat_id(again.stderr) == chat_id
    chat = _cli("chat", "-c", env=env, stdin="one more\n")
    assert chat.returncode == 0, chat.stderr
    assert _chat_id(chat.stderr) == chat_id
    log = _cli("log", env=env)
    assert log.returncode == 0
    assert log.stdout.splitlines() == [
        line for line in log.stdout.splitlines() if line.startswith(chat_id)
    ]
    assert server.url in log.stdout and "what is a monad?" in log.stdout
    rows = json.loads(_cli("log", "--json", env=env).stdout)
    assert [(r["chat_id"], r["prompt"], r["sessions"]) for r in rows] == [
        (chat_id, "what is a monad?", 3)
    ]
    assert isinstance(rows[0]["last_seen_message_id"], int)
    assert json.loads(_cli("log", "--json", "--url", "http://other", env=env).stdout) == []
    for argv in (["run", "-c", "--fake", "x"], ["run", "-c", "--chat-id", chat_id, "x"]):
        refused = _cli(*argv, env=env)
        assert refused.returncode == 2 and "--continue" in refused.stderr
    # --fake runs are not logged: their chats end with the command.
    assert _cli("run", "--fake", "hi", env=env).returncode == 0
    assert len(json.loads(_cli("log", "--json", env=env).stdout)) == 1


def test_an_empty_log_says_where_it_looked(tmp_path: Path) -> None:
    done = _cli("log", env=environment(XDG_DATA_HOME=str(tmp_path)))
    assert done.returncode == 0 and done.stdout == ""
    assert done.stderr.strip() == f"no chats in {tmp_path / 'coder-agents' / 'chats.jsonl'}"


# -- the prompt from a pipe, tools on run, --fake ends -------------------------------------------


def test_a_piped_prompt_needs_no_dash(server: FakeCoderServer) -> None:
    done = _cli("run", env=_env(server), stdin="repeat after me\n")
    assert done.returncode == 0, done.stderr
    assert "You said: repeat after me" in done.stdout
    empty = _cli("run", env=_env(server), stdin="")
    assert empty.returncode == 2
    assert empty.stderr.startswith("coder-agent run: the prompt read from stdin is empty")


def test_no_prompt_at_a_terminal_is_a_usage_error(server: FakeCoderServer) -> None:
    with Terminal("run", env=_env(server)) as term:
        term.expect("coder-agent run: no PROMPT: give one, or pipe it on stdin")
        assert term.wait() == 2


def test_run_takes_client_tools(server: FakeCoderServer, tmp_path: Path) -> None:
    tools = tmp_path / "weather_tools.py"
    tools.write_text(
        "from coder_proto import tool\n\n"
        "@tool\n"
        "def get_weather(city: str) -> dict:\n"
        '    """Get the current weather for a city."""\n'
        "    return {'city': city, 'temp_c': 21}\n"
    )
    done = _cli(
        "run", "--json", "--tools", str(tools), "What is the weather in Paris?", env=_env(server)
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert [c["tool_name"] for c in body["tool_calls"]] == ["get_weather"]
    assert body["tool_results"][0]["result"]["temp_c"] == 21
    missing = _cli("run", "--tools", str(tmp_path / "nope.py"), "hi", env=_env(server))
    assert (
        missing.returncode == 2
        and "--tools " in missing.stderr
        and "no such file" in missing.stderr
    )


def test_fake_runs_print_no_continue_line_for_a_server_that_is_gone() -> None:
    for argv, stdin in ((["run", "--fake", "hi"], ""), (["chat", "--fake"], "hi\n")):
        done = _cli(*argv, env=environment(), stdin=stdin)
        assert done.returncode == 0, done.stderr
        assert "chat_id=" in done.stderr and "continue with" not in done.stderr


# -- demo and argument mistakes follow run's rules -----------------------------------------------


def test_demo_ends_as_run_does() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    no_token = _cli("demo", env=environment(CODER_URL=url))
    assert no_token.returncode == 2
    assert no_token.stderr.startswith(f"coder-agent demo: no session token for {url}")
    down = _cli("demo", env=environment(CODER_URL=url, CODER_SESSION_TOKEN="t"))
    assert down.returncode == 3
    assert f"Using the Coder deployment at {url}" in down.stdout and "$CODER_URL" not in down.stdout


def test_argument_mistakes_are_one_line_in_the_commands_form() -> None:
    cases = {
        ("run", "--bogus", "hi"): "coder-agent run: unrecognized arguments: --bogus",
        ("run", "--timeout", "soon", "hi"): "coder-agent run: argument --timeout: takes a number",
        ("chats", "nope"): "coder-agent chats: argument ACTION: invalid choice: 'nope'",
        ("nope",): "coder-agent: argument COMMAND: invalid choice: 'nope'",
    }
    for argv, start in cases.items():
        done = _cli(*argv, env=environment())
        assert done.returncode == 2, argv
        (line,) = done.stderr.splitlines()
        assert line.startswith(start)
        assert line.endswith(f" (`{start.split(':')[0]} --help` lists the flags)")


def test_a_closed_stdout_ends_demo_and_log_with_141(server: FakeCoderServer) -> None:
    env = _env(server)
    assert _cli("run", "hi", env=env).returncode == 0  # one chat in the log
    for argv in (["demo", "--fake"], ["log"]):
        process = subprocess.Popen(
            [*CLI, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert process.stdout is not None
        process.stdout.close()  # before the program writes anything
        _, err = process.communicate(timeout=120)
        assert process.returncode == 141, err
        assert b"Traceback" not in err


# -- fake-server --env ---------------------------------------------------------------------------


def test_fake_server_env_prints_only_export_lines_and_closes_stdout() -> None:
    process = subprocess.Popen(
        [*CLI, "fake-server", "--env"],
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        out = process.stdout.read()  # returns at the end of output while the server serves
        assert process.poll() is None
        lines = out.splitlines()
        assert [line.split("=")[0] for line in lines] == [
            "export CODER_URL",
            "export CODER_SESSION_TOKEN",
            "export CODER_ORGANIZATION_ID",
            "export CODER_ORG_ID",
        ]
        values = dict(line.removeprefix("export ").split("=", 1) for line in lines)
        banner = process.stderr.readline()
        assert banner.startswith(f"Fake Coder server listening on {values['CODER_URL']}")
        done = _cli("models", env=environment(**values))
        assert done.returncode == 0 and "gpt-5" in done.stdout
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_fake_server_env_can_be_sourced_by_a_shell() -> None:
    script = (
        'source <("$@" fake-server --env 2>/dev/null)\n'
        "server=$!\n"
        '"$@" run "sourced" >/dev/null 2>&1; code=$?\n'
        'kill "$server"\n'
        'echo "$CODER_URL $code"\n'
    )
    done = subprocess.run(
        ["bash", "-c", script, "bash", *CLI],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    url, code = done.stdout.split()
    assert url.startswith("http://127.0.0.1:") and code == "0", done.stderr


# -- Ctrl-C --------------------------------------------------------------------------------------


def test_ctrl_c_on_run_prints_one_clear_line() -> None:
    with (
        FakeCoderServer(chunk_delay=0.2) as slow,
        Terminal("run", "tell me a long story", env=_env(slow)) as term,
    ):
        term.expect("You said")
        term.ctrl_c()
        assert term.wait() == 130
        assert term.screen.count("coder-agent run: stopped by Ctrl-C") == 1
        assert "interrupted; the run was interrupted" not in term.screen
        assert "Traceback" not in term.screen
