"""The corpus itself: every family is there, every case says what it is about, and every
expectation a case states is load-bearing (changed, it fails its case), so no key is
silently ignored by a runner.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from . import (
    test_dedup,
    test_history_cases,
    test_prefix_cases,
    test_promotion_session,
    test_promotion_translator,
    test_translate,
    test_turn_cases,
    test_usage_cases,
)
from .convert import FAMILIES, dump_case
from .corpus import CASES_DIR, Case, our_cases

#: Cases per family.
COUNTS = {
    "translate": 28,
    "dedup": 6,
    "usage": 8,
    "history": 10,
    "prefix": 5,
    "promotion": 6,
    "turn": 22,
}


def _runners(case: Case) -> list[Callable[[Case], None]]:
    if case.family == "promotion":
        if case.level == "session":
            return [test_promotion_session.test_promotion_case_at_session_level]
        return [test_promotion_translator.test_promotion_case_at_translator_level]
    return {
        "translate": [test_translate.test_translate_case],
        "usage": [test_usage_cases.test_usage_case],
        "dedup": [test_dedup.test_dedup_reader, test_dedup.test_dedup_turn],
        "history": [test_history_cases.test_history_case],
        "prefix": [test_prefix_cases.test_prefix_case],
        "turn": [test_turn_cases.test_turn_case],
    }[case.family]


ALL = [case for family in FAMILIES for case in our_cases(family)]


def test_every_family_is_complete() -> None:
    assert {family: len(our_cases(family)) for family in FAMILIES} == COUNTS
    assert sorted(p.name for p in CASES_DIR.iterdir()) == sorted(FAMILIES)
    assert len({case.id for case in ALL}) == sum(COUNTS.values()) == 85


def test_every_promotion_case_has_one_runner() -> None:
    levels = [case.level for case in our_cases("promotion")]
    assert sorted(levels) == ["session"] * 4 + ["translator"] * 2


@pytest.mark.parametrize("case", ALL, ids=[case.id for case in ALL])
def test_a_case_is_described_and_in_canonical_form(case: Case) -> None:
    text = case.path.read_text(encoding="utf-8")
    document = json.loads(text)
    assert list(document) == ["about", "given", "expect"]
    assert isinstance(case.about, str) and len(case.about) > 20, case.about
    # The files are written by one formatter, so a diff shows only what changed.
    assert text == dump_case(document)


def _mutated(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "~"
    if value is None:
        return "not null"
    if isinstance(value, list):
        return value[:-1] if value else ["extra"]
    assert isinstance(value, dict)
    return {**value, "extra": 1}


def _paths(expect: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    for key, value in expect.items():
        if key == "calls":
            for call_id, call in value.items():
                for sub in call:
                    yield (key, call_id, sub)
        elif key == "at_checkpoint":
            for sub in value:
                yield (key, sub)
        else:
            yield (key,)


def _fails(case: Case) -> bool:
    try:
        for runner in _runners(case):
            runner(case)
    except (AssertionError, TypeError, AttributeError, KeyError):
        return True
    return False


@pytest.mark.parametrize("case", ALL, ids=[case.id for case in ALL])
def test_every_expectation_is_checked(case: Case) -> None:
    """The case passes as written, and fails with any one of its expectations changed."""
    assert not _fails(case)
    ignored = []
    for path in _paths(case.expect):
        expect = copy.deepcopy(case.expect)
        node = expect
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = _mutated(node[path[-1]])
        if not _fails(attrs.evolve(case, expect=expect)):
            ignored.append(path)
    assert not ignored, f"changing these expectations does not fail the case: {ignored}"
