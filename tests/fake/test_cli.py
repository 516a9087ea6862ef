"""``coder-agent fake-server``: prints its base URL, session token and organization id, serves
until interrupted (issue: "the command line")."""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import sys

import httpx
import pytest

from coder_io_sync.cli import build_parser, main


def start(*args: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "coder_io_sync.cli", "fake-server", *args],
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


def test_bad_scripts_file_exits_with_2(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"rules": 5}')
    result = subprocess.run(
        [sys.executable, "-m", "coder_io_sync.cli", "fake-server", "--scripts", str(bad)],
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
            [sys.executable, "-m", "coder_io_sync.cli", "fake-server", "--port", port],
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
