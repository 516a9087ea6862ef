"""Seed transcripts: fake-server scenarios recorded through ``ModelWorld`` and a
``TranscriptRecorder``.

``python -m fuzz.seeds`` rewrites ``fuzz/corpus/*.jsonl``. Each scenario is one small agent
session (plain text, reasoning, client-tool loops, server tools, drops and redials,
promotions, a lost ``action_required``, errors, a timeout...). The same scenarios back the
replay tests (``tests/proto/transcript/test_replay.py``).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

from coder_proto import DynamicTool
from coder_proto.fake import (
    CallClientTool,
    CallServerTool,
    Cite,
    Fail,
    FakeConfig,
    Retry,
    Say,
    Script,
    Think,
    Wait,
)
from coder_proto.transcript import TranscriptRecorder

from .world import ModelWorld

__all__ = ["CORPUS", "SCENARIOS", "record", "write_corpus"]

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"

WEATHER = DynamicTool(
    name="get_weather",
    description="Get the weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


def _weather(args: Any) -> Any:
    return {"city": args.get("city"), "temp_c": 21}


def _world(recorder: TranscriptRecorder, **kwargs: Any) -> ModelWorld:
    config = kwargs.pop("config", None) or FakeConfig(chunk_delay=0.01)
    kwargs.setdefault("tool_fns", {"get_weather": _weather})
    kwargs.setdefault("tools", [WEATHER])
    return ModelWorld(config=config, recorder=recorder, **kwargs)


def plain_text(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(Script([Say("Hello there, this is a plain answer.", chunk=5)]))
    w.turn("say hello")
    return w


def reasoning(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(
        Script([Think("Let me think about it carefully.", chunk=4), Say("The answer is 42.")])
    )
    w.turn("think first", mode="stream")
    return w


def client_tool_loop(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(
        Script(
            [
                Think("I need the weather."),
                CallClientTool(name="get_weather", args={"city": "Paris"}),
                Say("It is {tool_result} in Paris."),
            ]
        )
    )
    w.turn("weather in Paris?")
    return w


def parallel_tools_twice(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(
        Script(
            [
                CallClientTool(name="get_weather", args={"city": "Paris"}),
                CallClientTool(name="get_weather", args={"city": "Oslo"}),
                Say("Both: {tool_results}."),
                CallClientTool(name="get_weather", args={"city": "Rome"}),
                Say("And Rome: {tool_result}."),
            ]
        )
    )
    w.turn("weather everywhere", mode="stream")
    return w


def server_tools(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(
        Script(
            [
                CallServerTool(name="read_file", args={"path": "README.md"}, result={"ok": True}),
                Cite(url="https://example.com/doc", title="Doc"),
                Say("The file says hello."),
            ]
        )
    )
    w.turn("read the readme", mode="stream")
    return w


def drop_and_redial(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(
        Script([Say("A long answer streamed in many small pieces.", chunk=3)])
    )
    w.model.faults.drop_stream_after_frames(4)
    w.turn("long answer", mode="stream")
    return w


def drops_in_tool_loop(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(
        Script(
            [
                Say("Checking.", chunk=2),
                CallClientTool(name="get_weather", args={"city": "Lima"}),
                Say("Lima is {tool_result}.", chunk=4),
            ]
        )
    )
    w.model.faults.drop_stream_after_frames(3, times=2)
    w.turn("weather in Lima")
    return w


def multi_turn(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(Script([Say("First answer.")]))
    w.model.config.scripts.push(Script([Say("Second answer, remembering the first.")]))
    w.turn("first")
    w.turn("second", mode="stream")
    w.call("dispose")
    return w


def lost_action_required(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(
        Script(
            [
                CallClientTool(name="get_weather", args={"city": "Kyiv"}),
                Say("Kyiv: {tool_result}."),
            ]
        )
    )
    w.model.faults.drop_stream_at("action_required", close_code=1001)
    w.turn("weather in Kyiv")
    return w


def chat_error(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(
        Script([Say("Starting"), Retry(times=1), Fail(message="provider exploded")])
    )
    w.turn("fail please", mode="stream")
    w.turn("fail please")
    return w


def timeout(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec, request_timeout=0.5)
    w.model.config.scripts.push(Script([Say("slow"), Wait(5.0), Say("too late")]))
    w.turn("be slow")
    w.drain()
    return w


def upgrade_rejected(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(Script([Say("after a rejection")]))
    w.model.faults.reject_upgrades(503, times=1)
    w.turn("reject once", mode="stream")
    return w


def promotion(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec, busy_behavior="queue")
    w.model.config.scripts.push(Script([Say("Turn one is slow.", chunk=2), Wait(0.3)]))
    w.model.config.scripts.push(Script([Say("Turn two after promotion.")]))
    w.turn("one")
    w.turn("two", mode="stream")
    return w


def cancelled(rec: TranscriptRecorder) -> ModelWorld:
    w = _world(rec)
    w.model.config.scripts.push(Script([Say("This will be cut short.", chunk=2), Wait(3.0)]))
    w.cancel_after("cut me", 0.2)
    w.drain()
    return w


SCENARIOS: dict[str, Callable[[TranscriptRecorder], ModelWorld]] = {
    "plain_text": plain_text,
    "reasoning": reasoning,
    "client_tool_loop": client_tool_loop,
    "parallel_tools_twice": parallel_tools_twice,
    "server_tools": server_tools,
    "drop_and_redial": drop_and_redial,
    "drops_in_tool_loop": drops_in_tool_loop,
    "multi_turn": multi_turn,
    "lost_action_required": lost_action_required,
    "chat_error": chat_error,
    "timeout": timeout,
    "upgrade_rejected": upgrade_rejected,
    "promotion": promotion,
    "cancelled": cancelled,
}


def record(name: str) -> tuple[str, ModelWorld]:
    """Run scenario ``name`` and return ``(transcript text, world)``."""
    lines: list[str] = []
    world = SCENARIOS[name](TranscriptRecorder(lines.append))
    return "".join(lines), world


def write_corpus(directory: pathlib.Path = CORPUS) -> list[pathlib.Path]:
    """Record every scenario into ``directory`` (one ``<name>.jsonl`` each)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name in SCENARIOS:
        text, _ = record(name)
        path = directory / f"{name}.jsonl"
        path.write_text(text, encoding="utf-8")
        out.append(path)
    return out


def write_live_corpus(directory: pathlib.Path = CORPUS) -> list[pathlib.Path]:
    """Record the live scenarios (``fuzz.live``: ``CoderAgent`` against ``FakeCoderServer``
    over loopback) into ``directory`` as ``live_<name>.jsonl``."""
    import asyncio

    from .live import SCENARIOS as LIVE
    from .live import record_live

    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name in LIVE:
        text, token = asyncio.run(record_live(name))
        if token in text:  # pragma: no cover - the recorder never writes it
            raise AssertionError("the session token leaked into a transcript")
        path = directory / f"live_{name}.jsonl"
        path.write_text(text, encoding="utf-8")
        out.append(path)
    return out


if __name__ == "__main__":
    import sys

    paths = write_corpus()
    if "--live" in sys.argv[1:]:
        paths += write_live_corpus()
    for path in paths:
        print(path)
