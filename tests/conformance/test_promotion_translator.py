"""Conformance: the ``promotion-*`` cases at translator level (FORMAT.md 4.6; state machines
E.2, E.3; D3, D8). ``level: model`` cases need the REST phase and teardown and run with the
turn machine.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from coder_proto import OutputPart
from coder_proto._stream.translator import TurnTranslator

from .cases import cases, load
from .mapping import (
    BlockIds,
    assert_parts_equal,
    make_translator,
    model_loop,
    strip_nulls,
    trace_view,
    wire_events,
)

MODEL_LEVEL_REASON = "model-level cases run with the turn machine"


def _state_view(translator: TurnTranslator, key: str) -> Any:
    views = {"anchoredTurnCursor": lambda: translator.turn_cursor}
    assert key in views, f"expected key {key!r} has no mapping"
    return views[key]()


@pytest.mark.parametrize("path", cases("promotion"))
def test_promotion_case_at_translator_level(path: pathlib.Path) -> None:
    case = load(path)
    assert case["kind"] == "promotion"
    spec = case["input"]
    if spec["level"] == "model":
        pytest.skip(MODEL_LEVEL_REASON)
    assert spec["level"] == "translator", spec["level"]
    expected = case["expected"]
    translator = make_translator(spec["options"])
    events = wire_events(spec["events"])
    ids = BlockIds()

    if spec["procedure"] == "model-loop":
        parts = model_loop(translator, events)
        for key, want in expected.items():
            if key == "parts":
                assert_parts_equal(want, parts, ids)
            elif key == "anchoredTurnCursor":
                assert _state_view(translator, key) == want
            else:
                assert strip_nulls(trace_view(parts, key)) == strip_nulls(want), key
        return

    assert spec["procedure"] == "ingest-each-then-finish", spec["procedure"]
    per_event: list[list[OutputPart]] = [translator.ingest(event) for event in events]
    finish = translator.finish()
    for key, want in expected.items():
        if key == "perEvent":
            assert len(per_event) == len(want)
            for want_parts, got in zip(want, per_event, strict=True):
                assert_parts_equal(want_parts, got, ids)
        elif key == "finish":
            assert_parts_equal(want, finish, ids)
        else:
            assert _state_view(translator, key) == want
