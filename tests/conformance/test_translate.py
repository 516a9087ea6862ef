"""Conformance: every ``translate`` case through a ``TurnTranslator``.

Every key of ``expect`` is checked; a key the runner does not know fails the case rather than
being skipped.
"""

from __future__ import annotations

import pytest

from coder_proto import OutputPart

from .corpus import Case, Unreadable, case_of, cases
from .mapping import (
    BlockIds,
    assert_parts_equal,
    check_trace,
    make_translator,
    run,
    wire_events,
)


@pytest.mark.parametrize("case", cases("translate"))
def test_translate_case(case: Case | Unreadable) -> None:
    case = case_of(case)
    given, expect = case.given, case.expect
    translator = make_translator(given["translator"])
    events = wire_events(given["events"])
    procedure = given["procedure"]

    if procedure == "run":
        check_trace(expect, run(translator, events))
        return

    assert procedure == "ingest_each", procedure
    per_event: list[list[OutputPart]] = []
    statuses: list[str | None] = []
    for event in events:
        per_event.append(translator.ingest(event))
        statuses.append(translator.terminal_status)
    if "per_event" in expect:
        ids = BlockIds()
        assert len(per_event) == len(expect["per_event"])
        for want, got in zip(expect["per_event"], per_event, strict=True):
            assert_parts_equal(want, got, ids)
    if "terminal_status_after_each" in expect:
        assert statuses == expect["terminal_status_after_each"]
    if "last_event_part_types" in expect:
        assert [p.type for p in per_event[-1]] == expect["last_event_part_types"]
    flat = [p for chunk in per_event for p in chunk]
    check_trace(
        expect, flat, skip={"per_event", "terminal_status_after_each", "last_event_part_types"}
    )
