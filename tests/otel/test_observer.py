"""The generic observer hooks (``coder_io_common.observer``) an instrumentation builds on: what
an agent reports to an observer of one's own, on every runtime."""

from __future__ import annotations

from typing import Any

from coder_integrations.fake_server import FakeCoderServer
from coder_io_common.observer import (
    AgentObserver,
    ToolObservation,
    TurnObservation,
    observe,
    tee_events,
)
from coder_proto import tool
from coder_proto._transport_events import TransportEventSink
from coder_proto.fake import CallClientTool, Say, Script


class _Turn(TurnObservation):
    def __init__(self, log: list[Any], streaming: bool) -> None:
        self.log = log
        log.append(("turn", streaming))

    def finished(self, result: Any, error: BaseException | None) -> None:
        self.log.append(("end", None if result is None else result.text, type(error).__name__))


class _Tool(ToolObservation):
    def __init__(self, log: list[Any], invocation: Any) -> None:
        super().__init__(invocation)
        self.log = log

    def __enter__(self) -> _Tool:
        self.log.append(("tool", self.invocation.tool.name))
        return self

    def outcome(self, outcome: Any) -> Any:
        self.log.append(("outcome", outcome.is_error))
        return outcome


class _Recording(AgentObserver):
    def __init__(self) -> None:
        self.log: list[Any] = []
        self.events: list[str] = []

    def turn_started(self, agent: Any, *, streaming: bool) -> TurnObservation:
        return _Turn(self.log, streaming)

    def tool_started(self, invocation: Any) -> ToolObservation:
        return _Tool(self.log, invocation)

    def transport_event(self, event: Any) -> None:
        self.events.append(event.type)


def test_an_observer_sees_turns_tools_and_the_sessions_events(
    runtime: Any, server: FakeCoderServer
) -> None:
    server.config.scripts.add(
        "weather",
        Script(
            (
                CallClientTool(name="get_weather", args={"city": "Bern"}),
                Say("done"),
            )
        ),
    )

    @tool
    def get_weather(city: str) -> str:
        """Weather."""
        return "sunny"

    observer = _Recording()

    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server, tools=[get_weather])
        observe(agent, observer)
        await rt.generate(agent, "weather in Bern")
        await rt.stream(agent, "hello")
        await rt.close(agent)

    runtime.run(scenario)
    assert observer.log == [
        ("turn", False),
        ("tool", "get_weather"),
        ("outcome", False),
        ("end", "done", "NoneType"),
        ("turn", True),
        ("end", observer.log[-1][1], "NoneType"),
    ]
    assert observer.events.count("segment:start") == 3
    assert "ws:open" in observer.events


def test_a_base_observer_changes_nothing(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        observe(agent, AgentObserver())
        result = await rt.generate(agent, "hello")
        streamed = await rt.stream(agent, "hello again")
        await rt.close(agent)
        return result, streamed

    result, streamed = runtime.run(scenario)
    assert result.text and streamed.result.text and streamed.error is None


def test_a_listener_that_raises_does_not_stop_the_others() -> None:
    seen: list[str] = []
    sink = TransportEventSink(lambda event: seen.append("original"))

    def broken(event: Any) -> None:
        raise RuntimeError("listener bug")

    tee_events(sink, broken)
    tee_events(sink, lambda event: seen.append("second"))
    tee_events(sink, broken)
    sink.emit(object())  # type: ignore[arg-type]
    assert seen == ["second", "original"]
    quiet = TransportEventSink()
    assert not quiet.enabled
    tee_events(quiet, lambda event: seen.append("quiet"))
    assert quiet.enabled
    quiet.emit(object())  # type: ignore[arg-type]
    assert seen[-1] == "quiet"
