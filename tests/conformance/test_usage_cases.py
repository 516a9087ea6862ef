"""Conformance: every ``usage`` case.

``level: segment`` cases run like ``translate`` ``run`` cases. ``level: turn`` cases translate
each segment with the model-loop procedure and sum the steps with ``sum_usage``. Every key of
``expect`` is checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from coder_proto import OutputPart
from coder_proto._stream.translator import TurnTranslator
from coder_proto._stream.usage import sum_usage

from .corpus import Case, Unreadable, case_of, cases
from .mapping import (
    check_trace,
    finish_of,
    make_translator,
    model_loop,
    run,
    strip_nulls,
    usage_view,
    wire_events,
)


def _segment_cursor(value: Any, previous: TurnTranslator | None) -> int:
    """A segment's ``turn_cursor``: an int, or the previous segment's highest message id (a
    resume reads on from the session's last seen message id)."""
    if isinstance(value, int):
        return value
    assert previous is not None, value
    assert previous.max_message_id == value["previous_segment_max_message_id"]
    return previous.max_message_id


def _run_turn(given: dict[str, Any]) -> list[list[OutputPart]]:
    steps: list[list[OutputPart]] = []
    previous: TurnTranslator | None = None
    for segment in given["segments"]:
        translator = make_translator(
            {
                **given["translator"],
                "turn_cursor": _segment_cursor(segment["turn_cursor"], previous),
                "submitted_tool_call_ids": segment["submitted_tool_call_ids"],
            },
            # A resume submits tool results: it has no prompt of its own to find.
            own_prompt_unknown=None if segment["kind"] == "new_turn" else False,
        )
        steps.append(model_loop(translator, wire_events(segment["events"])))
        previous = translator
    return steps


def _check_turn(expect: dict[str, Any], steps: list[list[OutputPart]]) -> None:
    finishes = [finish_of(parts) for parts in steps]
    views: dict[str, Callable[[], Any]] = {
        "turn_usage": lambda: usage_view(sum_usage(f.usage for f in finishes)),
        "final_text": lambda: check_final_text(steps[-1]),
        "step_count": lambda: len(steps),
        "finish_reason": lambda: finishes[-1].finish_reason,
    }
    for key, want in expect.items():
        if key == "steps":
            assert len(steps) == len(want)
            for parts, step_want in zip(steps, want, strict=True):
                check_trace(step_want, parts)
            continue
        assert key in views, f"expected key {key!r} is not part of the usage vocabulary"
        assert strip_nulls(views[key]()) == strip_nulls(want), key


def check_final_text(parts: list[OutputPart]) -> str:
    return "".join(p.delta for p in parts if p.type == "text-delta")  # type: ignore[union-attr]


@pytest.mark.parametrize("case", cases("usage"))
def test_usage_case(case: Case | Unreadable) -> None:
    case = case_of(case)
    given = case.given
    if given["level"] == "segment":
        assert given["procedure"] == "run"
        parts = run(make_translator(given["translator"]), wire_events(given["events"]))
        check_trace(case.expect, parts)
        return
    assert given["level"] == "turn", given["level"]
    assert given["procedure"] == "segments"
    _check_turn(case.expect, _run_turn(given))
