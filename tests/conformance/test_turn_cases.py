"""Conformance: every ``turn`` case, run by ``session.py`` through the real session, turn and
segment machines. Cases our design answers differently would be listed in ``DEVIATIONS.md``
and asserted in the decided form; there are none.
"""

from __future__ import annotations

import pytest

from .corpus import Case, Unreadable, case_of, cases
from .session import run_case


@pytest.mark.parametrize("case", cases("turn"))
def test_turn_case(case: Case | Unreadable) -> None:
    case = case_of(case)
    run_case(case.given, case.expect)
