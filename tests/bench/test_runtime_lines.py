"""The end-to-end and memory benchmarks measure every runtime (the same behaviour on
asyncio, trio and blocking, at a comparable cost): ``e2e.<runtime>``,
``memory.stream.<runtime>`` and ``memory.generate.<runtime>`` are measured lines with a target
and a verdict, never skipped. Timings are not asserted (shared machines are noisy)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNTIMES = ("asyncio", "trio", "sync")


@pytest.fixture(scope="module")
def lines() -> dict[str, dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.bench", "--smoke", "--only", "e2e,memory", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        env=dict(os.environ),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {item["name"]: item for item in json.loads(proc.stdout)}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_runtime_has_measured_e2e_and_memory_lines(
    lines: dict[str, dict[str, object]], runtime: str
) -> None:
    for name in (f"e2e.{runtime}", f"memory.stream.{runtime}", f"memory.generate.{runtime}"):
        assert name in lines, sorted(lines)
        item = lines[name]
        extra = item["extra"]
        assert isinstance(extra, dict) and "skipped" not in extra, (name, extra)
        assert isinstance(item["ratio"], float), (name, item)
        if name.startswith("memory."):
            # A smoke turn is small: its peak RSS growth can be nothing (a page or less).
            assert item["ratio"] >= 0 and "growth_mb" in extra, (name, item)
        else:
            assert item["ratio"] > 0, (name, item)
        assert "target" in extra and isinstance(extra["meets_target"], bool), (name, extra)
        assert extra["runtime"] == runtime
