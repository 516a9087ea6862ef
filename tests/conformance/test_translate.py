"""Conformance: every ``translate-*`` case through a ``TurnTranslator`` (FORMAT.md 4.1).

Every key of ``expected`` is checked, not only the ``asserted`` ones; a key the mapping does
not know fails the case rather than being skipped.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from coder_proto import OutputPart

from .cases import cases, load
from .mapping import (
    BlockIds,
    assert_parts_equal,
    make_translator,
    run,
    strip_nulls,
    trace_view,
    wire_events,
)


def _check_trace(expected: dict[str, Any], parts: list[OutputPart], skip: set[str]) -> None:
    ids = BlockIds()
    if "parts" in expected:
        assert_parts_equal(expected["parts"], parts, ids)
    for key, want in expected.items():
        if key in skip or key == "parts":
            continue
        assert strip_nulls(trace_view(parts, key)) == strip_nulls(want), key


@pytest.mark.parametrize("path", cases("translate"))
def test_translate_case(path: pathlib.Path) -> None:
    case = load(path)
    assert case["kind"] == "translate"
    spec = case["input"]
    expected = case["expected"]
    translator = make_translator(spec["options"])
    events = wire_events(spec["events"])
    procedure = spec["procedure"]

    if procedure == "run":
        _check_trace(expected, run(translator, events), set())
        return

    assert procedure == "ingest-each", procedure
    per_event: list[list[OutputPart]] = []
    statuses: list[str | None] = []
    for event in events:
        per_event.append(translator.ingest(event))
        statuses.append(translator.terminal_status)
    ids = BlockIds()
    handled = {"perEvent", "terminalStatusAfterEach"}
    if "perEvent" in expected:
        assert len(per_event) == len(expected["perEvent"])
        for want, got in zip(expected["perEvent"], per_event, strict=True):
            assert_parts_equal(want, got, ids)
    if "terminalStatusAfterEach" in expected:
        assert statuses == expected["terminalStatusAfterEach"]
    flat = [p for chunk in per_event for p in chunk]
    for key, want in expected.items():
        if key not in handled:
            assert strip_nulls(trace_view(flat, key)) == strip_nulls(want), key
