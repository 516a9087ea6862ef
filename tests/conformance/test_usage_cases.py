"""Conformance: every ``usage-*`` case (FORMAT.md 4.3; state machines F, D17).

``level: segment`` cases run like ``translate/run``. ``level: turn`` cases translate each
segment with the model-loop rule and sum the steps with ``sum_usage`` (F.5). Every key of
``expected`` is checked.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Callable
from typing import Any

import pytest

from coder_proto import OutputPart
from coder_proto._stream.translator import TurnTranslator
from coder_proto._stream.usage import sum_usage

from .cases import cases, load
from .mapping import (
    finish_of,
    make_translator,
    model_loop,
    run,
    strip_nulls,
    trace_view,
    usage_to_ts,
    wire_events,
)


def _segment_cursor(value: Any, previous: TurnTranslator | None) -> int:
    """A segment's ``turnCursor``: an int, or "maxMessageId of segment N (=K)" (the resume
    cursor is the session's last seen message id, D.1-D.2)."""
    if isinstance(value, int):
        return value
    assert previous is not None, value
    match = re.search(r"\(=(\d+)\)", str(value))
    assert match is not None, value
    assert previous.max_message_id == int(match.group(1))
    return previous.max_message_id


def _run_turn(spec: dict[str, Any]) -> tuple[list[list[OutputPart]], list[TurnTranslator]]:
    options = spec["options"]
    steps: list[list[OutputPart]] = []
    translators: list[TurnTranslator] = []
    previous: TurnTranslator | None = None
    for segment in spec["segments"]:
        translator = make_translator(
            {
                **options,
                "turnCursor": _segment_cursor(segment["turnCursor"], previous),
                "submittedToolCallIds": segment.get("submittedToolCallIds", []),
            },
            # A resume submits tool results: it has no prompt of its own to find (D3).
            own_prompt_unknown=None if segment["kind"] == "new-turn" else False,
        )
        steps.append(model_loop(translator, wire_events(segment["events"])))
        translators.append(translator)
        previous = translator
    return steps, translators


def _check_turn(expected: dict[str, Any], steps: list[list[OutputPart]]) -> None:
    finishes = [finish_of(parts) for parts in steps]
    views: dict[str, Callable[[], Any]] = {
        "steps": lambda: [
            {
                "finishReason": trace_view(parts, "finishReason"),
                "usage": trace_view(parts, "usage"),
                "providerMetadata": trace_view(parts, "providerMetadata"),
            }
            for parts in steps
        ],
        "turnUsage": lambda: usage_to_ts(sum_usage(f.usage for f in finishes)),
        "finalText": lambda: trace_view(steps[-1], "text"),
        "stepCount": lambda: len(steps),
        "finishReason": lambda: finishes[-1].finish_reason,
    }
    for key, want in expected.items():
        assert key in views, f"expected key {key!r} has no mapping"
        got = views[key]()
        if key == "steps":
            assert len(got) == len(want)
            for got_step, want_step in zip(got, want, strict=True):
                for step_key, step_want in want_step.items():
                    assert strip_nulls(got_step[step_key]) == strip_nulls(step_want), step_key
        else:
            assert strip_nulls(got) == strip_nulls(want), key


@pytest.mark.parametrize("path", cases("usage"))
def test_usage_case(path: pathlib.Path) -> None:
    case = load(path)
    assert case["kind"] == "usage"
    spec = case["input"]
    expected = case["expected"]
    if spec["level"] == "segment":
        assert spec["procedure"] == "run"
        parts = run(make_translator(spec["options"]), wire_events(spec["events"]))
        for key, want in expected.items():
            assert strip_nulls(trace_view(parts, key)) == strip_nulls(want), key
        return
    assert spec["level"] == "turn", spec["level"]
    assert spec["procedure"] == "segments"
    steps, _ = _run_turn(spec)
    _check_turn(expected, steps)
