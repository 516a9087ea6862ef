"""The reader plus the translator against the fake server model, as a Hypothesis state
machine (``fuzz.stateful``): drops and redials as rules; only library errors, and exactly the
committed text and reasoning once (state machines A.1-A.5, B.2, C.2; server-behaviour 3)."""

from __future__ import annotations

from hypothesis import settings

from fuzz.stateful import ReaderAgainstModel

ReaderAgainstModel.TestCase.settings = settings(
    max_examples=200, deadline=None, stateful_step_count=25
)
TestReaderAgainstModel = ReaderAgainstModel.TestCase
