"""CI runs a short fuzzing budget (``python -m fuzz``): every harness runs and nothing is
found."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


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
