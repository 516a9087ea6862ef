"""Record live sessions against the fake server over loopback, replay them offline through the
core, and compare (issue "Transcripts"; docs/transcripts.md). Every recorded transcript of a
full session is scanned for the session token (docs/architecture.md rule 6)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from coder_proto.transcript._format import parse_transcript
from coder_proto.transcript._records import WsFrame
from coder_proto.transcript._replay import replay
from fuzz.live import SCENARIOS, record_live


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_live_session_replays_offline_to_the_same_outcome(name: str) -> None:
    text, token = asyncio.run(record_live(name))
    assert token not in text
    transcript = parse_transcript(text)
    assert transcript.of(WsFrame)
    result = replay(transcript)
    assert result.turns
    for turn in result.turns:
        assert turn.recorded is not None
        assert turn.matches_recording, (turn.summary(), turn.recorded, result.divergences)
    again = replay(transcript)
    assert again.to_json() == result.to_json()


def test_coder_agent_run_records_and_replay_prints_the_outcome(tmp_path: Any) -> None:
    """``coder-agent run PROMPT --fake --record FILE`` then ``coder-agent replay FILE``."""
    path = tmp_path / "session.jsonl"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "coder_integrations.cli",
            "run",
            "hello there",
            "--fake",
            "--record",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    transcript = parse_transcript(path.read_text(encoding="utf-8"))
    assert transcript.of(WsFrame)
    shown = subprocess.run(
        [sys.executable, "-m", "coder_integrations.cli", "replay", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["turns"][0]["matches_recording"] is True
    assert data["turns"][0]["text"]
    assert "parts" not in data["turns"][0]
    parts = subprocess.run(
        [sys.executable, "-m", "coder_integrations.cli", "replay", str(path), "--parts"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert parts.returncode == 0, parts.stderr
    assert "text-delta" in parts.stdout
    assert "finish" in parts.stdout


@pytest.mark.parametrize("flags", [[], ["--parts"]])
def test_replay_prints_text_that_is_not_valid_unicode_as_escapes(
    tmp_path: Any, flags: list[str]
) -> None:
    """A streamed delta can carry a lone surrogate (``"\\ud800"`` in the frame): the
    transcript keeps the escape, the replayed text has U+FFFD in its place (D32), and
    printing it does not end the command with a ``UnicodeEncodeError``."""
    corpus = pathlib.Path(__file__).resolve().parents[2] / "fuzz" / "corpus"
    text = (corpus / "plain_text.jsonl").read_text(encoding="utf-8")
    marker = '\\"text\\":\\"Hello'
    assert marker in text
    path = tmp_path / "surrogate.jsonl"
    path.write_text(text.replace(marker, marker + "\\\\ud800", 1), encoding="utf-8")
    shown = subprocess.run(
        [sys.executable, "-m", "coder_integrations.cli", "replay", str(path), *flags],
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    # The edited frame no longer matches the recorded outcome: the replay says so (status 1)
    # and prints every turn, without a traceback; the lone surrogate reaches the user as U+FFFD.
    assert shown.returncode == 1, shown.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in shown.stderr and b"did not replay as recorded" in shown.stderr
    assert "Hello\ufffd".encode() in shown.stdout
    shown.stdout.decode("utf-8")  # what was printed is valid UTF-8
