"""The committed content of a fake step (``coder_proto.fake._run.StepAccumulator``): consecutive
text or reasoning deltas merge into one part (server-behaviour 8.5: the committed message
holds whole parts), whatever interleaves with them, at a cost linear in the deltas."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto.fake._run import PartOp, StepAccumulator

STAMP = "2026-01-01T00:00:00Z"


def text(value: str) -> PartOp:
    return PartOp("assistant", {"type": "text", "text": value}, "text")


def reasoning(value: str) -> PartOp:
    return PartOp("assistant", {"type": "reasoning", "text": value}, "reasoning")


def call(call_id: str) -> PartOp:
    part = {"type": "tool-call", "tool_call_id": call_id, "tool_name": "t", "args": {}}
    return PartOp("assistant", part, "call", client=True)


def args_delta(value: str) -> PartOp:
    part = {"type": "tool-call", "tool_call_id": "c", "tool_name": "t", "args_delta": value}
    return PartOp("assistant", part, "delta")


def result(call_id: str) -> PartOp:
    part = {"type": "tool-result", "tool_call_id": call_id, "tool_name": "t", "result": 1}
    return PartOp("tool", part, "result")


def naive(ops: list[PartOp]) -> list[dict[str, Any]]:
    """What the committed content must be: runs of the same text kind merged."""
    out: list[dict[str, Any]] = []
    merging: str | None = None
    for op in ops:
        if op.kind in ("text", "reasoning"):
            if merging == op.kind:
                out[-1]["text"] += op.part["text"]
            else:
                part = {"type": op.kind, "text": op.part["text"]}
                if op.kind == "reasoning":
                    part["created_at"] = STAMP
                out.append(part)
                merging = op.kind
            continue
        merging = None
        if op.kind in ("call", "inline_result", "source"):
            part = dict(op.part)
            if op.kind != "source":
                part["created_at"] = STAMP
            out.append(part)
    return out


OPS = st.one_of(
    st.builds(text, st.text(max_size=3)),
    st.builds(reasoning, st.text(max_size=3)),
    st.builds(call, st.sampled_from(["a", "b"])),
    st.builds(args_delta, st.text(max_size=3)),
    st.builds(result, st.sampled_from(["a", "b"])),
)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(OPS, max_size=60), reads=st.sets(st.integers(0, 60)))
def test_the_committed_content_merges_runs_of_text_whenever_it_is_read(
    ops: list[PartOp], reads: set[int]
) -> None:
    acc = StepAccumulator()
    for index, op in enumerate(ops):
        streamed = acc.add(op, STAMP)
        assert streamed["type"] == op.part["type"]
        if index in reads:  # reading mid-step (an interruption's partial) changes nothing
            assert acc.content == naive(ops[: index + 1])
    assert acc.content == naive(ops)
    assert [p["tool_call_id"] for p in acc.results] == [
        op.part["tool_call_id"] for op in ops if op.kind == "result"
    ]
    assert acc.output_chars == sum(
        len(op.part.get("text", op.part.get("args_delta", "")))
        for op in ops
        if op.kind != "call" and op.kind != "result"
    )


def test_a_long_block_is_one_part_with_every_delta() -> None:
    acc = StepAccumulator()
    pieces = [f"w{i} " for i in range(20_000)]
    for piece in pieces:
        acc.add(text(piece), STAMP)
    acc.add(call("a"), STAMP)
    acc.add(text("after"), STAMP)
    assert [p["type"] for p in acc.content] == ["text", "tool-call", "text"]
    assert acc.content[0]["text"] == "".join(pieces)
    assert acc.partial() == [
        {"type": "text", "text": "".join(pieces)},
        {"type": "text", "text": "after"},
    ]
