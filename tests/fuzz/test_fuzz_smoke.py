"""CI runs a short fuzzing budget (``python -m fuzz``): every harness runs and nothing is
found."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_a_short_fuzz_run_executes_every_harness_without_findings() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fuzz", "--seconds", "4", "--seed", "7"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for harness in ("bytes", "mutate", "stateful"):
        line = next(line for line in proc.stdout.splitlines() if line.strip().startswith(harness))
        assert int(line.split()[1]) > 0, line
    assert "no findings" in proc.stdout


def test_the_seed_corpus_parses_and_holds_frames() -> None:
    from coder_proto.transcript import WsFrame, parse_transcript

    paths = sorted((ROOT / "fuzz" / "corpus").glob("*.jsonl"))
    assert len(paths) >= 10
    for path in paths:
        assert parse_transcript(path.read_text(encoding="utf-8")).of(WsFrame), path


def test_retyped_events_never_contain_themselves() -> None:
    """Regression (fuzz finding mutate-2f45d9d7d9e0 / -20d7a1cd41be, a harness bug): the
    ``retype`` mutation once inserted one shared list into itself, and the mutant could not be
    serialized (RecursionError, circular reference)."""
    import json
    import random

    from fuzz.mutate import Stream, mutate

    event = {"type": "message_part", "chat_id": "c", "message_part": {"part": {"type": "text"}}}
    stream = Stream(batches=((event, event),), chat_id="c", after_id=None, tool_names=())
    rng = random.Random(0)
    for _ in range(2000):
        for frames in mutate(stream, "retype", rng):
            for frame in frames:
                json.loads(frame)
