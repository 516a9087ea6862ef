"""Conformance: the session-level ``promotion`` cases (a prompt queued behind another run,
through the cursor probe, the queued submission, the stream and the teardown), run by
``session.py`` like the turn cases. Translator-level promotion cases run in
``test_promotion_translator.py``.
"""

from __future__ import annotations

import pytest

from .corpus import Case, Unreadable, case_of, cases
from .session import run_case


@pytest.mark.parametrize("case", cases("promotion", level="session"))
def test_promotion_case_at_session_level(case: Case | Unreadable) -> None:
    case = case_of(case)
    run = run_case(case.given, case.expect)
    # The finish part agrees with the result the call returned.
    outcome = run.order[-1]
    if outcome.error is None:
        finish = outcome.parts[-1]
        assert finish.type == "finish"
        assert (finish.finish_reason, finish.raw_finish_reason) == (
            outcome.result.finish_reason,
            outcome.result.raw_finish_reason,
        )
