"""Output parts and normalised usage (A.2, F.2, F.5, D17)."""

from __future__ import annotations

from coder_proto import (
    ErrorPart,
    Finish,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Source,
    StreamStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolInputEnd,
    ToolInputStart,
    ToolResult,
    Usage,
)
from coder_proto._outputs import part_to_dict
from coder_proto._wire import ChatError


def test_every_part_has_a_type_and_dict_form() -> None:
    parts = [
        TextStart("text-1"),
        TextDelta("text-1", "hi"),
        TextEnd("text-1"),
        ReasoningStart("reasoning-2"),
        ReasoningDelta("reasoning-2", "r"),
        ReasoningEnd("reasoning-2"),
        ToolInputStart(tool_call_id="c", tool_name="t", provider_executed=True, dynamic=True),
        ToolInputEnd(tool_call_id="c"),
        ToolCall(tool_call_id="c", tool_name="t", input="{}"),
        ToolResult(tool_call_id="c", tool_name="t", result={}),
        Source(id="s", url="u", title=None),
        ErrorPart(error=ChatError(message="m")),
        StreamStart(warnings=("w",)),
        Finish(finish_reason="stop"),
    ]
    types = [p.type for p in parts]
    assert types == [
        "text-start",
        "text-delta",
        "text-end",
        "reasoning-start",
        "reasoning-delta",
        "reasoning-end",
        "tool-input-start",
        "tool-input-end",
        "tool-call",
        "tool-result",
        "source",
        "error",
        "stream-start",
        "finish",
    ]
    for part in parts:
        d = part_to_dict(part)
        assert d["type"] == part.type
    assert part_to_dict(ErrorPart(error=ChatError(message="m")))["error"] == {
        "message": "m",
        "retryable": False,
    }
    assert (
        part_to_dict(Finish(finish_reason="stop", usage=Usage(input_tokens=1)))["usage"][
            "input_tokens"
        ]
        == 1
    )


def test_error_part_builds_the_chat_error() -> None:
    exc = ErrorPart(error=ChatError(message="m", detail="d", kind="k"), chat_id="c").exception()
    assert str(exc) == "m: d" and exc.chat_id == "c"  # type: ignore[attr-defined]


def test_total_tokens_is_input_plus_output_when_both_known_d17() -> None:
    assert Usage(input_tokens=238, output_tokens=16).total_tokens == 254
    assert (
        Usage(input_tokens=238).total_tokens is None and Usage(output_tokens=1).total_tokens is None
    )


def test_usage_sum_none_plus_none_is_none_f5() -> None:
    a = Usage(input_tokens=5, no_cache_tokens=5, output_tokens=7, raw={"input_tokens": 5})
    b = Usage(input_tokens=3, cache_read_tokens=120, output_tokens=None, reasoning_tokens=None)
    total = a + b
    assert total == Usage(input_tokens=8, no_cache_tokens=5, cache_read_tokens=120, output_tokens=7)
    assert total.reasoning_tokens is None and total.text_tokens is None and total.raw is None
    assert (Usage() + Usage()) == Usage()
    assert Usage.__add__(a, 3) is NotImplemented  # type: ignore[arg-type]
