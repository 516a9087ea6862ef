"""The runnable example (examples/otel/traced_agent.py) prints the span tree of a traced tool
loop with a dropped stream, and the metrics' totals."""

from __future__ import annotations

import pathlib
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "otel" / "traced_agent.py"


def test_the_example_prints_the_span_tree_and_the_metrics() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("In Oslo it is 21 degrees today")
    tree = lines[lines.index("handle request") :]
    assert tree[:8] == [
        "handle request",
        "  invoke_agent weather-bot",
        "    chat",
        "      POST /api/v2/chats",
        "    execute_tool get_weather",
        "      weather station lookup",
        "    chat  [coder.stream.drop]  [coder.stream.redial]",
        "      POST /api/v2/chats/{chat}/tool-results",
    ]
    assert "coder.stream.drops: 1" in lines and "coder.stream.redials: 1" in lines
    assert any(line.startswith("gen_ai.client.token.usage: ") for line in lines)
