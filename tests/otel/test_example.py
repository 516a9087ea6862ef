"""The runnable example (examples/otel/traced_agent.py) prints the answer once, the span tree of
a traced tool loop with a dropped stream, and the metrics' totals with their units; nothing
else (the dropped stream is shown by the spans, not by a log line)."""

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
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0].startswith("In Oslo it is 21 degrees today")
    assert lines[0].count("21 degrees") == 1
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
    assert "coder.stream.drops: 1 drop" in lines and "coder.stream.redials: 1 redial" in lines
    assert any(
        line.startswith("gen_ai.client.token.usage: ") and line.endswith(" tokens")
        for line in lines
    )
    assert any(
        line.startswith("gen_ai.client.operation.duration: ") and line.endswith(" s")
        for line in lines
    )
