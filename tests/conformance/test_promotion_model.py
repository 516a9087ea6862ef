"""Conformance: the ``promotion-*`` cases at model level (FORMAT.md 4.6; state machines D.1,
E.1-E.5; D3, D8, D9, D25).

A model-level case runs one segment through the real session machines and
``tests/core_driver.py``: the cursor-seeding probe and the queued submission answer come from
the case's ``rest``, the stream is one real ``StreamReader`` connection that receives the case's
events as one frame and then stays open (``idle``) until the segment settles or its
``request_timeout`` fires (``idle-until-abort``). Translator-level cases run in
``test_promotion_translator.py``.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from coder_proto import StreamStart
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._agent.turn import Turn
from tests.core_driver import CaseEnv, Driver, ai_sdk_prompt, rewrite

from .cases import cases, load
from .mapping import BlockIds, assert_parts_equal, finish_reason_to_ts, strip_nulls, usage_to_ts

TRANSLATOR_LEVEL_REASON = "translator-level cases run in test_promotion_translator.py"


class ModelRun:
    def __init__(self, spec: dict[str, Any]) -> None:
        config = spec["config"]
        self.spec = spec
        self.env = CaseEnv(rest=spec.get("rest"), organization_id=config["organizationId"])
        timeout_ms = config.get("requestTimeoutMs")
        self.session = Session(
            SessionConfig(
                base_url="https://coder.test",
                token="tok-secret",
                organization_id=config["organizationId"],
                chat_id=config.get("chatId"),
                last_seen_message_id=config.get("lastSeenMessageId"),
                request_timeout=timeout_ms / 1000.0 if timeout_ms else None,
            ),
            reader_factory=self.env.reader_factory,
        )
        self.driver = Driver(self.session, http=self.env.http)
        self.turn: Turn | None = None

    def execute(self) -> None:
        call = self.spec["call"]
        assert call["kind"] == "new-turn", call["kind"]
        driver = self.driver
        turn = self.session.segment(ai_sdk_prompt(call["prompt"]), now=driver.now, mode="stream")
        self.turn = turn
        driver.start(turn)
        stream = self.spec["stream"]
        assert len(driver.sockets) == 1, "the segment dials exactly one stream"
        driver.sockets[0].send_events(stream["events"])
        driver.settle()
        end = driver.now + 60.0
        while not turn.done:  # "idle" / "idle-until-abort": only a deadline can end it
            due = driver.next_due()
            if due is None or due > end:
                break
            driver.now = max(driver.now, due)
            driver.settle()
        driver.drain_background()

    # -- views ------------------------------------------------------------------------------

    def parts(self) -> list[Any]:
        assert self.turn is not None
        return [p for p in self.turn.parts if not isinstance(p, StreamStart)]

    def requests(self, method: str, suffix: str) -> list[str]:
        return [
            rewrite(r.path)
            for r in self.driver.requests()
            if r.method == method and suffix in r.path
        ]


def _check(expected: dict[str, Any], run: ModelRun) -> None:
    turn = run.turn
    assert turn is not None
    for key, want in expected.items():
        if key == "error":
            error = turn.error
            assert error is not None, "the segment was expected to fail"
            for field, value in want.items():
                if field == "name":
                    assert type(error).__name__ == value
                else:
                    assert getattr(error, field) == value, field
            continue
        if key == "deletedQueueEntries":
            got = [
                [path.split("/")[-3], int(path.split("/")[-1])]
                for path in run.requests("DELETE", "/queue/")
            ]
            assert got == want
            continue
        if key == "interrupted":
            got = [path.split("/")[-2] for path in run.requests("POST", "/interrupt")]
            assert got == want
            continue
        if key == "clientOps":
            assert run.env.ops == want
            continue
        if key == "anchoredTurnCursor":
            assert turn.segment is not None and turn.segment.translator is not None
            assert turn.segment.translator.turn_cursor == want
            continue
        assert turn.error is None, turn.error
        result = turn.result()
        step = result.steps[-1]
        if key == "text":
            assert result.text == want
        elif key == "usage":
            assert strip_nulls(usage_to_ts(step.usage)) == strip_nulls(want)
        elif key == "providerMetadata":
            assert step.provider_metadata == want
        elif key == "finishReason":
            assert {"unified": step.finish_reason, "raw": step.raw_finish_reason} == want
        elif key == "parts":
            assert_parts_equal(want, run.parts(), BlockIds())
        else:  # pragma: no cover - every key of the corpus is mapped
            raise AssertionError(f"unmapped expected key {key!r}")


@pytest.mark.parametrize("path", cases("promotion"))
def test_promotion_case_at_model_level(path: pathlib.Path) -> None:
    case = load(path)
    assert case["kind"] == "promotion"
    spec = case["input"]
    if spec["level"] != "model":
        pytest.skip(TRANSLATOR_LEVEL_REASON)
    run = ModelRun(spec)
    run.execute()
    _check(case["expected"], run)
    # The segment's finish reason in the trace agrees with the result (G.1).
    if run.turn is not None and run.turn.error is None:
        finish = run.parts()[-1]
        assert finish_reason_to_ts(finish) == {
            "unified": run.turn.result().finish_reason,
            "raw": run.turn.result().raw_finish_reason,
        }
