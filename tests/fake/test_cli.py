"""``coder-agent fake-server``: prints its base URL, session token and organization id (under
both names), serves until interrupted, takes a flag for every setting and fault, traces, and
answers a bad flag value with one line."""

from __future__ import annotations

import contextlib
import json
import pathlib
import re
import signal
import subprocess
import sys

import httpx
import pytest

from coder_integrations.cli import build_parser, main
from coder_integrations.fake_server import FakeCoderServer
from coder_integrations.fake_server.command import server_from_args

from .netclients import SyncWs


def start(*args: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "coder_integrations.cli", "fake-server", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    banner = proc.stdout.readline()
    assert banner.startswith("Fake Coder server listening on http://127.0.0.1:"), banner
    values = {}
    for _ in range(4):
        key, _, value = proc.stdout.readline().strip().partition("=")
        values[key] = value
    return proc, values


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(timeout=10)


def test_fake_server_command_prints_what_a_client_needs_and_serves(tmp_path: pathlib.Path) -> None:
    scripts = tmp_path / "scripts.json"
    scripts.write_text(
        json.dumps({"rules": [{"match": "ping", "script": [{"type": "say", "text": "pong"}]}]})
    )
    proc, values = start(
        "--token", "cli-token", "--seed", "3", "--chunk-delay", "0", "--scripts", str(scripts)
    )
    try:
        assert set(values) == {
            "CODER_URL",
            "CODER_SESSION_TOKEN",
            "CODER_ORGANIZATION_ID",
            "CODER_ORG_ID",
        }
        assert values["CODER_ORG_ID"] == values["CODER_ORGANIZATION_ID"]
        assert values["CODER_SESSION_TOKEN"] == "cli-token"
        url = values["CODER_URL"]
        with httpx.Client(
            base_url=url, headers={"Coder-Session-Token": "cli-token"}, verify=False
        ) as http:
            body = {
                "organization_id": values["CODER_ORGANIZATION_ID"],
                "content": [{"type": "text", "text": "ping"}],
            }
            chat = http.post("/api/v2/chats", json=body).json()
            for _ in range(200):
                history = http.get(f"/api/v2/chats/{chat['id']}/messages").json()["messages"]
                if history[0]["role"] == "assistant":
                    break
            assert history[0]["content"][0]["text"] == "pong"
    finally:
        assert stop(proc) == 0


def test_fake_server_command_legacy_profile() -> None:
    proc, values = start(
        "--legacy-only", "--no-promotion-stamps", "--no-coordinates", "--legacy-envelopes"
    )
    try:
        assert len(values["CODER_SESSION_TOKEN"]) > 20, "a random token by default"
        with httpx.Client(
            base_url=values["CODER_URL"],
            headers={"Coder-Session-Token": values["CODER_SESSION_TOKEN"]},
            verify=False,
        ) as http:
            assert http.get("/api/v2/chats").status_code == 404
            assert http.get("/api/experimental/chats").status_code == 200
    finally:
        assert stop(proc) == 0


def test_fake_server_command_serves_the_newest_server_or_the_compatibility_window() -> None:
    """D36: by default the chat routes answer 404 under the experimental prefix;
    ``--experimental-mount`` serves them under both prefixes."""
    for flags, experimental in (((), 404), (("--experimental-mount",), 200)):
        proc, values = start(*flags)
        try:
            with httpx.Client(
                base_url=values["CODER_URL"],
                headers={"Coder-Session-Token": values["CODER_SESSION_TOKEN"]},
                verify=False,
            ) as http:
                assert http.get("/api/v2/chats").status_code == 200
                assert http.get("/api/experimental/chats").status_code == experimental
        finally:
            assert stop(proc) == 0


def test_bad_scripts_file_exits_with_2(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"rules": 5}')
    result = subprocess.run(
        [sys.executable, "-m", "coder_integrations.cli", "fake-server", "--scripts", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "cannot load" in result.stderr


def test_port_in_use_exits_with_1() -> None:
    proc, values = start()
    try:
        port = values["CODER_URL"].rsplit(":", 1)[1]
        result = subprocess.run(
            [sys.executable, "-m", "coder_integrations.cli", "fake-server", "--port", port],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 1
    finally:
        stop(proc)


def test_dispatcher(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    args = parser.parse_args(["fake-server", "--port", "0"])
    assert args.command == "fake-server" and callable(args.handler)
    assert main([]) == 2
    assert "fake-server" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["no-such-command"])


# -- flags -------------------------------------------------------------------------------------


def test_a_bad_port_is_one_line_and_no_traceback() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "coder_integrations.cli", "fake-server", "--port", "99999"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        "coder-agent fake-server: --port takes a port from 0 to 65535, got '99999'\n"
    )


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--port", "-1"], "--port"),
        (["--port", "http"], "--port"),
        (["--seed", "-1"], "--seed"),
        (["--organization-id", "acme"], "--organization-id"),
        (["--username", " "], "--username"),
        (["--chunk-delay", "-0.5"], "--chunk-delay"),
        (["--chunk-delay", "nan"], "--chunk-delay"),
        (["--interrupt-delay", "soon"], "--interrupt-delay"),
        (["--requires-action-timeout", "inf"], "--requires-action-timeout"),
        (["--max-queue", "0"], "--max-queue"),
        (["--part-buffer-bytes", "-5"], "--part-buffer-bytes"),
        (["--ping-interval", "0"], "--ping-interval"),
        (["--drop-after-frames", "x"], "--drop-after-frames"),
        (["--drop-after-frames", "3:0"], "--drop-after-frames"),
        (["--drop-after-frames", "3:2:1"], "--drop-after-frames"),
        (["--drop-before", "nothing"], "--drop-before"),
        (["--drop-close-code", "99"], "--drop-close-code"),
        (["--drop-probability", "1.5"], "--drop-probability"),
        (["--reject-upgrades", "700"], "--reject-upgrades"),
        (["--reject-watch", ""], "--reject-watch"),
        (["--fail-requests", "create_chat"], "--fail-requests"),
        (["--fail-requests", "stream_chat:503"], "--fail-requests"),
        (["--delay-requests", "all:-1"], "--delay-requests"),
        (["--stall-frames", "1"], "--stall-frames"),
        (["--stall-runs", "later"], "--stall-runs"),
        (["--fail-snapshots", "none"], "--fail-snapshots"),
        (["--trace", "/nonexistent/dir/trace.log"], "--trace"),
        (["--models", "/nonexistent/models.json"], "--models"),
        (["--scripts", "/nonexistent/book.json"], "--scripts"),
    ],
)
def test_bad_flag_values_are_one_line(
    flags: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fake-server", *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"coder-agent fake-server: {names}")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[{", "cannot load"),
        ('{"models": 3}', "a model catalog is a list"),
        ('[{"model": "a"}, {"model": "a"}]', "listed more than once"),
        (
            '[{"model": "a", "is_default": true}, {"model": "b", "is_default": true}]',
            "more than one",
        ),
        ('[{"model": "a", "context_limit": 0}]', "'context_limit' must be positive"),
        ('[{"model": "a", "colour": "red"}]', "unknown key 'colour'"),
        ('[{"model": "a", "enabled": "yes"}]', "'enabled' has the wrong type"),
        ('[{"display_name": "no model"}]', "'model' must be a non-empty string"),
    ],
)
def test_bad_model_catalogs(
    tmp_path: pathlib.Path, content: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "models.json"
    path.write_text(content)
    assert main(["fake-server", "--models", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def served(*flags: str, stack: contextlib.ExitStack) -> FakeCoderServer:
    args = build_parser().parse_args(["fake-server", *flags])
    server = server_from_args(args, sys.stderr, stack)
    stack.enter_context(server)
    return server


def client(server: FakeCoderServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Coder-Session-Token": server.token})


def create(http: httpx.Client, org: str, text: str = "hi") -> httpx.Response:
    return http.post(
        "/api/v2/chats", json={"organization_id": org, "content": [{"type": "text", "text": text}]}
    )


def test_fault_flags_take_effect() -> None:
    with contextlib.ExitStack() as stack:
        server = served(
            "--chunk-delay",
            "0",
            "--fail-requests",
            "create_chat:503:2",
            "--fail-requests",
            "all:418",
            "--reject-upgrades",
            "429:all",
            "--stall-runs",
            "30",
            stack=stack,
        )
        with client(server) as http:
            org = server.organization_id
            answers = [create(http, org) for _ in range(4)]
            assert [a.status_code for a in answers] == [503, 503, 418, 201]
            chat = answers[-1].json()
            assert chat["queued_for_capacity"] is True
            assert "queued_for_capacity" not in create(http, org).json(), "one run stalls"
            ws = http.get(
                f"/api/v2/chats/{chat['id']}/stream",
                headers={
                    "Connection": "Upgrade",
                    "Upgrade": "websocket",
                    "Sec-WebSocket-Version": "13",
                    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                },
            )
            assert ws.status_code == 429
        faults = server.faults
        assert faults.upgrade_rejections[0].remaining is None


def test_profile_flags_reach_the_config(tmp_path: pathlib.Path) -> None:
    models = tmp_path / "models.json"
    models.write_text(
        json.dumps(
            [
                {"model": "house-model", "display_name": "House", "provider": "acme"},
                {"model": "big", "is_default": True, "context_limit": 1000000},
                {"model": "retired", "enabled": False},
            ]
        )
    )
    org = "6f2d0c6e-9a57-4c86-9d0a-53c7b0c7f1aa"
    with contextlib.ExitStack() as stack:
        server = served(
            "--models",
            str(models),
            "--organization-id",
            org.upper(),
            "--username",
            "ada",
            "--max-queue",
            "3",
            "--part-buffer-bytes",
            "10",
            "--run-start-delay",
            "0.5",
            "--retry-base-delay",
            "1",
            "--retry-max-delay",
            "2",
            "--no-zero-value-keys",
            "--no-html-escape",
            "--no-message-id-gaps",
            "--allow-unnamed-uploads",
            "--envelope-ping-interval",
            "3",
            "--history-reset-on-connect",
            "--drop-probability",
            "0.25",
            "--delay-frames",
            "0.5",
            "--fail-snapshots",
            "all",
            "--drop-before",
            "terminal:2",
            "--drop-before",
            "message_part",
            "--drop-close-code",
            "4000",
            "--stall-frames",
            "2:forever",
            "--delay-requests",
            "get_chat:0.25",
            stack=stack,
        )
        config = server.config
        assert (config.max_queue, config.part_buffer_bytes, config.run_start_delay) == (3, 10, 0.5)
        assert (config.retry_base_delay, config.retry_max_delay) == (1.0, 2.0)
        assert not (config.zero_value_keys or config.html_escape or config.message_id_gaps)
        assert not config.require_upload_filename and config.envelope_ping_interval == 3.0
        assert [m.model for m in config.models] == ["house-model", "big", "retired"]
        faults = server.faults
        assert faults.history_reset_on_connect and not faults.chatd_disabled
        assert faults.random_drop_probability == 0.25
        assert faults.frame_delays[0].seconds == 0.5
        assert faults.snapshot_failures[0].remaining is None
        drops = faults.stream_drops
        assert [(d.event_type, d.status, d.remaining, d.close_code) for d in drops] == [
            ("status", "*terminal*", 2, 4000),
            ("message_part", None, 1, 4000),
        ]
        assert faults.frame_stalls[0].seconds is None and faults.frame_stalls[0].after_frames == 2
        assert faults.request_delays[0].remaining is None
        with client(server) as http:
            me = http.get("/api/v2/users/me").json()
            assert (me["organization_ids"], me["username"]) == ([org], "ada")
            catalog = http.get(f"/api/v2/organizations/{org}/chats/models").json()
            listed = {m["model"]: (m["is_default"], m["enabled"]) for m in catalog["models"]}
            assert listed == {
                "house-model": (False, True),
                "big": (True, True),
                "retired": (False, False),
            }
            assert {p["type"] for p in catalog["providers"]} == {"acme", "anthropic"}


def test_agents_can_be_disabled() -> None:
    with contextlib.ExitStack() as stack:
        server = served("--chatd-disabled", stack=stack)
        with client(server) as http:
            refused = create(http, server.organization_id)
            assert refused.status_code == 503
            assert refused.json()["message"].startswith("AI Gateway must be enabled")
            assert http.get("/api/v2/chats").status_code == 200, "reads stay up"


def test_trace_file_lists_requests_and_frames_without_the_token(tmp_path: pathlib.Path) -> None:
    trace = tmp_path / "trace.log"
    with contextlib.ExitStack() as stack:
        server = served(
            "--chunk-delay", "0", "--trace", str(trace), "--token", "s3cret-token", stack=stack
        )
        with client(server) as http:
            chat_id = create(http, server.organization_id).json()["id"]
            http.get(f"/api/v2/chats/{chat_id}/messages?coder_session_token=s3cret-token")
        with SyncWs(server, f"/api/v2/chats/{chat_id}/stream") as ws:
            ws.wait_status({"waiting"})
    text = trace.read_text()
    assert "s3cret-token" not in text
    lines = text.splitlines()
    assert re.fullmatch(r" *\d+\.\d{3} #\d+ POST /api/v2/chats 201 create_chat", lines[0])
    assert "coder_session_token=REDACTED 200 get_messages" in lines[1]
    assert any(
        re.search(r"#\d+ GET /api/v2/chats/\S+/stream 101 stream_chat$", line) for line in lines
    )
    assert any(' frame [{"type":' in line for line in lines)
    assert lines[-1].endswith("client closed")


def test_trace_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    proc, values = start("--trace", "--chunk-delay", "0")
    try:
        with httpx.Client(base_url=values["CODER_URL"]) as http:
            assert http.get("/api/v2/buildinfo").status_code == 200
    finally:
        assert stop(proc) == 0
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert re.search(r"#\d+ GET /api/v2/buildinfo 200 get_buildinfo", err), err
