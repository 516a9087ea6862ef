"""The agent core (``coder_proto.agent``): settings (H.1, H.2), prompt inputs (appendix P,
wire 7), the client-tool dispatch plan (D5), the structured-output ladder (docs/agents.md "Structured output" rules 1-4, D7), single flight (G.2), history pages and workspace files,
driven through the in-memory driver where a turn runs."""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib
import pickle
from typing import Any, Literal

import attrs
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto._actions import ToolOutcome
from coder_proto._agent.agent_core import ENV_ORGANIZATION_ID, AgentCore, GenerateResult
from coder_proto._agent.history import HistoryJob
from coder_proto._agent.options import OPTION_NAMES, AgentOptions
from coder_proto._agent.prompt import (
    AssistantMessage,
    FileContent,
    SystemMessage,
    TextContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from coder_proto._agent.prompt_plan import (
    AttachedFile,
    Attachment,
    prepare_attachment,
    prepare_prompt,
)
from coder_proto._agent.segment import StepResult
from coder_proto._agent.structured_output import (
    NUDGE_PROMPT,
    STRUCTURED_OUTPUT_ACK,
    StructuredOutput,
    StructuredOutputError,
)
from coder_proto._agent.tool_calls import ToolInvocation, plan_tool_calls
from coder_proto._agent.tools import Tool, ToolContext, tool
from coder_proto._agent.turn import TurnResult
from coder_proto._constants import MAX_ATTACHMENT_BYTES
from coder_proto._errors import CoderAgentError
from coder_proto._outputs import ToolCall, Usage
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._transport_events import TransportEventSink
from coder_proto._wire.chats import FileReferenceInput
from tests.core_driver import (
    CHAT,
    CaseEnv,
    Driver,
    Respond,
    action_required,
    message,
    status,
    tool_call_part,
)

BASE = "https://coder.test"


def core(**kwargs: Any) -> AgentCore:
    """An ``AgentCore``: the ``AgentOptions`` fields among ``kwargs`` are its options."""
    kwargs.setdefault("base_url", BASE)
    kwargs.setdefault("token", "tok-secret")
    kwargs.setdefault("organization_id", "org-1")
    options = AgentOptions(**{k: kwargs.pop(k) for k in list(kwargs) if k in OPTION_NAMES})
    return AgentCore(options, **kwargs)


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Get the weather for a city."""
    return {"city": city, "temp_c": 21}


def call(name: str, args: str = "{}", call_id: str = "c1", **kw: Any) -> ToolCall:
    return ToolCall(tool_call_id=call_id, tool_name=name, input=args, **kw)


# -- settings (H.1, H.2) --------------------------------------------------------------------------


def test_d33_organization_id_defaults_from_the_environment_else_stays_unknown() -> None:
    # With neither, the first turn asks the deployment (tests/integration/test_organization.py).
    assert AgentCore(base_url=BASE, token="t").organization_id is None
    assert AgentCore(base_url=BASE, token="t", env={"CODER_ORG_ID": "org-b"}).organization_id == (
        "org-b"
    )
    both = {ENV_ORGANIZATION_ID: "org-a", "CODER_ORG_ID": "org-b"}
    assert AgentCore(base_url=BASE, token="t", env=both).organization_id == "org-a"
    blank = {ENV_ORGANIZATION_ID: "  ", "CODER_ORG_ID": "org-b"}
    assert AgentCore(base_url=BASE, token="t", env=blank).organization_id == "org-b"
    agent = AgentCore(base_url=BASE, token="t", env={ENV_ORGANIZATION_ID: "org-env"})
    assert agent.organization_id == "org-env" and agent.config.organization_id == "org-env"
    explicit = AgentCore(
        AgentOptions(organization_id="org-x"),
        base_url=BASE,
        token="t",
        env={ENV_ORGANIZATION_ID: "org-env"},
    )
    assert explicit.organization_id == "org-x"
    assert (
        AgentCore(base_url=BASE, token="t", env={ENV_ORGANIZATION_ID: "  "}).organization_id is None
    )
    with pytest.raises(CoderAgentError, match="organization_id must be a non-empty string"):
        AgentCore(AgentOptions(organization_id=" "), base_url=BASE, token="t")


def test_h2_defaults_max_retries_zero_and_64_steps_and_construction_does_no_io() -> None:
    agent = core()
    config = agent.config
    assert config.max_retries == 0 and config.max_steps == 64
    assert config.settle_deadline == 15.0 and config.settle_retry_delay == 1.0
    assert agent.session.chat_id is None and agent.session.actions() == []
    assert "tok-secret" not in repr(agent) and "tok-secret" not in repr(config)


def test_h2_settings_reach_the_session_config() -> None:
    agent = core(
        model="gpt-5",
        instructions="Be brief.",
        tools=[get_weather],
        request_timeout=30,
        chat_id="chat-9",
        last_seen_message_id=7,
        workspace_id="ws-1",
        mcp_server_ids=["m1"],
        reasoning_effort="low",
        plan_mode="plan",
        busy_behavior="queue",
        max_steps=3,
        max_retries=2,
        settle_deadline=float("inf"),
        settle_retry_delay=-1,
    )
    config = agent.config
    assert (config.model, config.instructions, config.request_timeout) == ("gpt-5", "Be brief.", 30)
    assert [t.name for t in config.tools] == ["get_weather"]
    assert config.tools[0].input_schema["properties"] == {"city": {"type": "string"}}
    assert (config.chat_id, config.last_seen_message_id) == ("chat-9", 7)
    assert agent.session.chat_id == "chat-9" and agent.session.last_seen_message_id == 7
    assert (config.workspace_id, config.mcp_server_ids) == ("ws-1", ("m1",))
    assert (config.reasoning_effort, config.plan_mode, config.busy_behavior) == (
        "low",
        "plan",
        "queue",
    )
    assert (config.max_steps, config.max_retries) == (3, 2)
    # H.2 sanitising: +inf clamps to 2**31-1 ms, a negative delay falls back to the default.
    assert config.settle_deadline == (2**31 - 1) / 1000.0 and config.settle_retry_delay == 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mcp_server_ids": "m1"},
        {"max_retries": -1},
        {"max_steps": 0},
        {"busy_behavior": "later"},
        {"last_seen_message_id": 3},  # D.1: a cursor needs its chat
        {"tools": [get_weather, get_weather]},
        {"tools": ["not a tool"]},
        {"output_type": int, "instructions": 5},
    ],
)
def test_h2_bad_settings_raise_typed_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(CoderAgentError):
        core(**kwargs)


def test_tools_accept_decorated_plain_functions_schemas_and_models() -> None:
    @attrs.frozen
    class Query:
        text: str

    def plain(n: int) -> int:
        return n

    agent = core(
        tools={
            "weather": get_weather,
            "plain": plain,
            "raw": Tool.from_schema("raw", {"type": "object"}, lambda **kw: kw),
            "query": Tool.from_model(Query, lambda q: q.text, name="query"),
        }
    )
    assert sorted(agent.tools) == ["plain", "query", "raw", "weather"]
    assert sorted(t.name for t in agent.config.tools) == ["plain", "query", "raw", "weather"]


# -- workspace files (H.2.3) -------------------------------------------------------------------


class Files:
    def __init__(self, workspace_id: str) -> None:
        self.workspace_id = workspace_id

    def write_file(self, path: str, data: bytes) -> None:
        pass


def test_h2_3_the_workspace_files_adapter_must_match_the_workspace() -> None:
    with pytest.raises(CoderAgentError, match="workspace"):
        core(workspace_id="ws-1", workspace_files=Files("ws-2"))
    with pytest.raises(CoderAgentError, match="workspace"):
        core(workspace_files=Files("ws-2"))
    with pytest.raises(CoderAgentError, match="write_file"):
        core(workspace_id="ws-1", workspace_files=object())
    files = Files("ws-1")
    agent = core(workspace_id="ws-1", workspace_files=files)
    assert agent.workspace_upload("assets.zip") == (files, "assets.zip")
    for bad in ("", "  ", "a\x00b", None):
        with pytest.raises(CoderAgentError, match="workspace path"):
            agent.workspace_upload(bad)


def test_upload_to_workspace_without_an_adapter_is_a_clear_error() -> None:
    with pytest.raises(CoderAgentError, match=r"created with workspace_files=\.\.\."):
        core().workspace_upload("a.zip")


def test_require_chat_targets_the_chat_or_the_last_known_one() -> None:
    agent = core()
    with pytest.raises(CoderAgentError, match="no chat"):
        agent.require_chat()
    agent.session.last_known_chat_id = "old"
    assert agent.require_chat() == "old"
    agent.session.chat_id = "new"
    assert agent.require_chat() == "new"


# -- single flight (G.2) ----------------------------------------------------------------------


def test_g2_single_flight_covers_the_whole_call() -> None:
    agent = core()
    agent.begin()
    with pytest.raises(CoderAgentError, match="single-flight"):
        agent.begin()
    agent.end()
    agent.begin()
    agent.end()
    assert not agent.busy


def test_g2_a_turn_in_flight_makes_the_agent_busy() -> None:
    env = CaseEnv()
    agent = core(reader_factory=env.reader_factory)
    driver = Driver(agent.session, http=env.http)
    driver.start(agent.stream(prepare_prompt("hi").build([]), now=driver.now))
    assert agent.busy
    with pytest.raises(CoderAgentError, match="single-flight"):
        agent.begin()


# -- prompts (appendix P, wire 7) --------------------------------------------------------------


def test_p_a_string_is_one_user_text_message() -> None:
    plan = prepare_prompt("hello")
    assert plan.reads == ()
    assert plan.build([]) == (UserMessage((TextContent("hello"),)),)


def test_p_exactly_one_of_prompt_and_messages() -> None:
    with pytest.raises(CoderAgentError, match="exactly one"):
        prepare_prompt()
    with pytest.raises(CoderAgentError, match="exactly one"):
        prepare_prompt("a", [{"role": "user", "content": "b"}])


def test_p_content_parts_form_one_user_message() -> None:
    ref = FileReferenceInput(file_name="a.py", start_line=1, end_line=2, content="x")
    plan = prepare_prompt(
        [
            "Summarize",
            TextContent("this"),
            {"type": "text", "text": "and this"},
            {"type": "file", "file_id": "f-1", "media_type": "application/pdf"},
            AttachedFile(file_id="f-2", media_type="text/plain", filename="n.txt"),
            FileContent(file_id="f-3"),
            ref,
        ]
    )
    (msg,) = plan.build([])
    assert isinstance(msg, UserMessage)
    assert msg.content == (
        TextContent("Summarize"),
        TextContent("this"),
        TextContent("and this"),
        FileContent(file_id="f-1", media_type="application/pdf"),
        FileContent(file_id="f-2", media_type="text/plain", filename="n.txt"),
        FileContent(file_id="f-3"),
        ref,
    )


def test_p3_attachment_bytes_are_uploaded_by_the_turn_with_a_media_type_from_the_name() -> None:
    (msg,) = prepare_prompt([Attachment(content=b"%PDF-1", filename="Report.PDF")]).build([])
    assert isinstance(msg, UserMessage)
    assert msg.content == (
        FileContent(data=b"%PDF-1", media_type="application/pdf", filename="Report.PDF"),
    )
    explicit = prepare_prompt(Attachment(content=bytearray(b"a,b"), media_type="text/csv"))
    (msg,) = explicit.build([])
    assert isinstance(msg, UserMessage)
    assert msg.content == (FileContent(data=b"a,b", media_type="text/csv"),)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"content": b"x"}, "media type"),
        ({"content": b"x", "filename": "archive.zip"}, r'"\.zip" of "archive\.zip" is not'),
        ({"content": b"x", "media_type": "application/zip"}, "not allowed"),
    ],
)
def test_wire7_attachments_are_checked_before_anything_is_read_or_sent(
    kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(CoderAgentError, match=match):
        Attachment(**kwargs)


def test_wire7_oversized_bytes_fail_while_the_prompt_is_prepared() -> None:
    big = Attachment(content=b"x" * (MAX_ATTACHMENT_BYTES + 1), media_type="text/plain")
    with pytest.raises(CoderAgentError, match="10 MiB"):
        prepare_prompt([big])


def test_wire7_exactly_10_mib_is_allowed() -> None:
    data = b"x" * MAX_ATTACHMENT_BYTES
    (msg,) = prepare_prompt([Attachment(content=data, media_type="text/plain")]).build([])
    assert isinstance(msg, UserMessage) and msg.content[0].data == data  # type: ignore[union-attr]


def test_attachments_from_paths_and_file_objects_are_read_by_the_adapter(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "notes.md"
    handle = io.BytesIO(b"{}")
    handle.name = "/tmp/data.json"
    plan = prepare_prompt(
        [
            "Read these",
            Attachment(content=path),
            Attachment(content=handle),
            Attachment(content=str(path), filename="x.txt"),
        ]
    )
    assert [(r.path, r.stream, r.media_type, r.filename) for r in plan.reads] == [
        (str(path), None, "text/markdown", "notes.md"),
        (None, handle, "application/json", "data.json"),
        (str(path), None, "text/plain", "x.txt"),
    ]
    (msg,) = plan.build([b"# notes", bytearray(b"{}"), b"text"])
    assert isinstance(msg, UserMessage)
    assert msg.content[1:] == (
        FileContent(data=b"# notes", media_type="text/markdown", filename="notes.md"),
        FileContent(data=b"{}", media_type="application/json", filename="data.json"),
        FileContent(data=b"text", media_type="text/plain", filename="x.txt"),
    )
    with pytest.raises(CoderAgentError, match="10 MiB"):
        plan.build([b"x" * (MAX_ATTACHMENT_BYTES + 1), b"{}", b""])
    with pytest.raises(CoderAgentError, match="binary mode"):
        plan.build(["text", b"{}", b""])
    with pytest.raises(CoderAgentError, match="expected the contents of 3 files"):
        plan.build([b""])


def test_attachment_content_must_be_bytes_a_path_or_a_file_object() -> None:
    with pytest.raises(CoderAgentError, match="Unsupported file content"):
        Attachment(content=12)
    with pytest.raises(CoderAgentError, match="filename"):
        Attachment(content=b"", filename=3)  # type: ignore[arg-type]


def test_dict_messages_and_message_classes() -> None:
    plan = prepare_prompt(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "see"},
                    {"type": "file", "data": b"hi", "filename": "a.txt"},
                ],
            },
        ]
    )
    msgs = plan.build([])
    assert msgs == (
        SystemMessage("Be brief."),
        UserMessage((TextContent("first"),)),
        AssistantMessage(),
        UserMessage(
            (
                TextContent("see"),
                FileContent(data=b"hi", media_type="text/plain", filename="a.txt"),
            )
        ),
    )
    tool_plan = prepare_prompt(
        messages=[
            UserMessage((TextContent("q"),)),
            {
                "role": "tool",
                "content": [
                    {"tool_call_id": "c1", "output": {"ok": True}, "tool_name": "t"},
                    {"tool_call_id": "c2", "output": "boom", "is_error": True},
                ],
            },
        ]
    )
    assert tool_plan.build([])[-1] == ToolMessage(
        (
            ToolResultContent(tool_call_id="c1", output={"ok": True}, tool_name="t"),
            ToolResultContent(tool_call_id="c2", output="boom", is_error=True),
        )
    )
    single = prepare_prompt({"role": "user", "content": "solo"})
    assert single.build([]) == (UserMessage((TextContent("solo"),)),)
    assert prepare_prompt(messages=SystemMessage("s")).build([]) == (SystemMessage("s"),)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prompt": ["text", {"role": "user", "content": "x"}]}, "only messages"),
        ({"messages": ["text"]}, "only messages"),
        ({"messages": 5}, "only messages"),
        ({"prompt": [{"role": "robot", "content": "x"}]}, "role"),
        ({"prompt": [{"role": "system", "content": ["x"]}]}, "string"),
        ({"prompt": [{"role": "tool", "content": "x"}]}, "list"),
        ({"prompt": [{"role": "tool", "content": [{"output": 1}]}]}, "tool_call_id"),
        ({"prompt": [{"type": "image"}]}, "unsupported content part type"),
        ({"prompt": [{"type": "text", "text": 5}]}, "string"),
        ({"prompt": [{"type": "file"}]}, "needs"),
        ({"prompt": [3.5]}, "unsupported content part"),
        ({"prompt": 3.5}, "unsupported content part"),
    ],
)
def test_bad_prompts_raise_typed_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(CoderAgentError, match=match):
        prepare_prompt(**kwargs)


def test_a_user_dict_message_may_hold_one_part_or_none() -> None:
    one = prepare_prompt({"role": "user", "content": {"type": "text", "text": "t"}})
    assert one.build([]) == (UserMessage((TextContent("t"),)),)
    empty = prepare_prompt({"role": "user"})
    assert empty.build([]) == (UserMessage(()),)


def test_prepare_attachment_checks_before_reading() -> None:
    plan = prepare_attachment(b"{}", filename="a.json")
    assert plan.data == b"{}" and plan.media_type == "application/json"
    plan = prepare_attachment("/data/report.pdf")
    assert plan.path == "/data/report.pdf" and plan.media_type == "application/pdf"
    assert plan.filename == "report.pdf"
    with pytest.raises(CoderAgentError, match="not allowed"):
        prepare_attachment("/data/a.zip", media_type="application/zip")
    with pytest.raises(CoderAgentError, match="10 MiB"):
        prepare_attachment(b"x" * (MAX_ATTACHMENT_BYTES + 1), media_type="text/plain")


# -- client tools (D5) ------------------------------------------------------------------------


def test_d5_unknown_tools_invalid_input_and_missing_functions_get_error_outcomes() -> None:
    schema_only = Tool.from_schema("schema_only", {"type": "object"})
    plan = plan_tool_calls(
        [
            call("nope", call_id="a"),
            call("get_weather", '{"city": 3}', call_id="b"),
            call("get_weather", "not json", call_id="c"),
            call("schema_only", call_id="d"),
            call("get_weather", '{"city": "Paris"}', call_id="e"),
            call("get_weather", '{"city": "Rome"}', call_id="e"),  # a duplicate id runs once
        ],
        {"get_weather": get_weather, "schema_only": schema_only},
        chat_id=CHAT,
    )
    errors = {o.tool_call_id: o for o in plan.outcomes}
    assert set(errors) == {"a", "b", "c", "d"}
    assert all(o.is_error and isinstance(o.output, str) for o in errors.values())
    assert "unknown tool 'nope'" in errors["a"].output
    assert "invalid input" in errors["b"].output and "$.city" in errors["b"].output
    assert "not valid JSON" in errors["c"].output
    assert "no function" in errors["d"].output
    (inv,) = plan.invocations
    assert inv.tool_call_id == "e" and inv.kwargs == {"city": "Paris"} and not inv.is_async
    assert inv.succeeded(inv.call()) == ToolOutcome(
        tool_call_id="e", output={"city": "Paris", "temp_c": 21}
    )


def test_d5_a_raising_tool_reports_a_string_error() -> None:
    @tool
    def boom(x: int) -> None:
        raise ValueError(f"bad {x}")

    (inv,) = plan_tool_calls([call("boom", '{"x": 1}')], {"boom": boom}).invocations
    with pytest.raises(ValueError, match="bad 1") as info:
        inv.call()
    assert inv.failed(info.value) == ToolOutcome(
        tool_call_id="c1", output="ValueError: bad 1", is_error=True
    )
    assert inv.failed(KeyError()).output == "KeyError"


def test_tools_receive_their_context_and_async_tools_are_flagged() -> None:
    @tool
    async def lookup(key: str, ctx: ToolContext) -> str:
        return f"{ctx.chat_id}/{ctx.tool_call_id}/{key}"

    (inv,) = plan_tool_calls(
        [call("lookup", '{"key": "k"}')], {"lookup": lookup}, chat_id=CHAT
    ).invocations
    assert inv.is_async
    assert inv.kwargs["ctx"] == ToolContext(chat_id=CHAT, tool_call_id="c1", tool_name="lookup")
    assert isinstance(inv, ToolInvocation)


def test_encoded_outputs_of_models() -> None:
    @attrs.frozen
    class Out:
        value: int

    (inv,) = plan_tool_calls(
        [call("get_weather", '{"city": "X"}')], {"get_weather": get_weather}
    ).invocations
    assert inv.succeeded(Out(3)).output == {"value": 3}


# -- structured output (docs/agents.md "Structured output" rules 1-4) -------------------------------------------------


@attrs.frozen
class Answer:
    severity: Literal["critical", "major", "minor"]
    summary: str


class PAnswer(pydantic.BaseModel):
    severity: Literal["critical", "major", "minor"]
    summary: str


@dataclasses.dataclass
class DAnswer:
    severity: str
    summary: str


def so_call(args: str, call_id: str = "s1", **kw: Any) -> ToolCall:
    return call("structured_output", args, call_id, **kw)


def result_with(*steps_calls: tuple[ToolCall, ...], **fields: Any) -> TurnResult:
    steps = tuple(
        StepResult(finish_reason="stop", tool_calls=calls, usage=Usage()) for calls in steps_calls
    )
    fields.setdefault("chat_id", CHAT)
    return TurnResult(text="", steps=steps, **fields)


VALID = '{"severity": "major", "summary": "disk"}'
INVALID = '{"severity": "huge", "summary": "disk"}'


@pytest.mark.parametrize(
    ("output_type", "expected"),
    [
        (Answer, Answer("major", "disk")),
        (PAnswer, PAnswer(severity="major", summary="disk")),
        (DAnswer, DAnswer("major", "disk")),
        (
            {"type": "object", "properties": {"severity": {"type": "string"}}},
            {"severity": "major", "summary": "disk"},
        ),
    ],
)
def test_structured_output_parses_model_classes_and_schemas(
    output_type: Any, expected: Any
) -> None:
    so = StructuredOutput(output_type)
    assert so.tool.name == "structured_output" and so.tool.description
    assert so.find(result_with((so_call(VALID),))) == (True, expected, ())


def test_structured_output_wraps_non_object_types() -> None:
    so = StructuredOutput(list[int])
    assert so.wrapped
    assert so.tool.input_schema["properties"] == {
        "value": {"type": "array", "items": {"type": "integer"}}
    }
    assert so.find(result_with((so_call('{"value": [1, 2]}'),))) == (True, [1, 2], ())
    found, _value, problems = so.find(result_with((so_call('{"value": ["x"]}'),)))
    assert not found and problems
    assert "list[int]" in repr(so)


def test_rule2_a_schema_invalid_refiling_never_shadows_a_valid_answer() -> None:
    so = StructuredOutput(Answer)
    result = result_with(
        (call("other"), so_call(VALID, "s1")),
        (so_call(INVALID, "s2"),),
    )
    assert so.find(result) == (True, Answer("major", "disk"), ())
    newest_valid = result_with(
        (so_call(VALID, "s1"),), (so_call('{"severity": "minor", "summary": "b"}', "s2"),)
    )
    assert so.find(newest_valid)[1] == Answer("minor", "b")


def test_rule2_problems_describe_the_newest_invalid_filing() -> None:
    so = StructuredOutput(Answer)
    found, value, problems = so.find(
        result_with((so_call('{"summary": 1}', "s1"),), (so_call(INVALID, "s2"),))
    )
    assert not found and value is None
    assert len(problems) == 1 and "$.severity" in problems[0]


def test_provider_executed_calls_of_the_same_name_are_not_filings() -> None:
    so = StructuredOutput(Answer)
    assert so.find(result_with((so_call(VALID, provider_executed=True),)))[0] is False


def test_rule2_filings_are_acknowledged_in_the_loop_or_answered_with_their_errors() -> None:
    agent = core(output_type=Answer)
    plan = agent.plan_tools([so_call(VALID, "s1"), so_call(INVALID, "s2")])
    assert plan.invocations == ()
    ok, bad = plan.outcomes
    assert ok == ToolOutcome(tool_call_id="s1", output=STRUCTURED_OUTPUT_ACK)
    assert bad.is_error and "invalid input" in bad.output


def test_output_type_registers_the_tool_and_asks_for_it_in_the_instructions() -> None:
    agent = core(output_type=Answer, instructions="You triage bugs.", tools=[get_weather])
    names = [t.name for t in agent.config.tools]
    assert names == ["get_weather", "structured_output"]
    assert agent.config.instructions is not None
    assert agent.config.instructions.startswith("You triage bugs.\n\n")
    assert "structured_output tool exactly once" in agent.config.instructions
    assert "structured_output" in (core(output_type=Answer).config.instructions or "")


def test_a_user_tool_named_structured_output_clashes_with_output_type() -> None:
    def structured_output(x: int) -> int:
        return x

    with pytest.raises(CoderAgentError, match="clashes"):
        core(output_type=Answer, tools=[structured_output])


# -- the ladder, driven through turns ----------------------------------------------------------


class World:
    """An agent core on the in-memory driver: scripted REST, sockets the test feeds."""

    def __init__(self, **kwargs: Any) -> None:
        self.env = CaseEnv()
        self.events: list[Any] = []
        sink = TransportEventSink(self.events.append, wall_clock=lambda: 0.0)
        self.core = core(reader_factory=self.env.reader_factory, sink=sink, **kwargs)
        self.driver = Driver(self.core.session, http=self.env.http, tools=self.run_tool)

    def run_tool(self, tool_call: ToolCall) -> ToolOutcome:
        plan = self.core.plan_tools([tool_call])
        if plan.outcomes:
            return plan.outcomes[0]
        (inv,) = plan.invocations
        try:
            return inv.succeeded(inv.call())
        except Exception as exc:
            return inv.failed(exc)

    def send(self, *events: dict[str, Any]) -> None:
        self.driver.sockets[-1].send_events(events)
        self.driver.settle()

    def prompts(self) -> list[Any]:
        return [
            r.json["content"][0]["text"]
            for r in self.driver.requests()
            if r.op in ("create_chat", "create_chat_message")
        ]


def filed(msg_id: int, args: dict[str, Any], call_id: str = "s1") -> list[dict[str, Any]]:
    return [
        status("running"),
        message(
            msg_id,
            [tool_call_part(call_id, "structured_output", args=args)],
            usage={"input_tokens": 10, "output_tokens": 2},
        ),
        status("requires_action"),
        action_required((call_id, "structured_output", json.dumps(args))),
    ]


def prose(msg_id: int, text: str = "Here is my answer in prose.") -> list[dict[str, Any]]:
    return [
        status("running"),
        message(msg_id, text, usage={"input_tokens": 5, "output_tokens": 3}),
        status("waiting"),
    ]


def test_rule1_a_valid_filing_is_acknowledged_and_the_turn_winds_down() -> None:
    w = World(output_type=Answer)
    gen = w.core.generate(prepare_prompt("triage").build([]), now=w.driver.now)
    w.driver.start(gen.turn)
    w.send(*filed(3, {"severity": "major", "summary": "disk"}))
    submitted = [r.json for r in w.driver.requests() if r.op == "submit_tool_results"]
    assert submitted == [
        {"results": [{"tool_call_id": "s1", "output": STRUCTURED_OUTPUT_ACK, "is_error": False}]}
    ]
    w.send(*prose(5, "Done."))
    result = gen.advance(gen.turn.result(), now=w.driver.now)
    assert isinstance(result, GenerateResult)
    assert result.output == Answer("major", "disk") and result.text == "Done."
    assert not gen.nudged and w.prompts() == ["triage"]


def test_rule3_prose_on_an_idle_chat_gets_exactly_one_nudge() -> None:
    w = World(output_type=Answer)
    gen = w.core.generate(prepare_prompt("triage").build([]), now=w.driver.now)
    w.driver.start(gen.turn)
    w.send(*prose(3))
    nudge = gen.advance(gen.turn.result(), now=w.driver.now)
    assert nudge is gen.turn and gen.nudged
    w.driver.start(nudge)
    w.send(*filed(5, {"severity": "minor", "summary": "typo"}))
    w.send(*prose(7, "Filed."))
    result = gen.advance(gen.turn.result(), now=w.driver.now)
    assert isinstance(result, GenerateResult)
    assert result.output == Answer("minor", "typo")
    assert w.prompts() == ["triage", NUDGE_PROMPT]
    # One call's result: every step of both turns and the summed usage (F.5).
    assert [s.finish_reason for s in result.steps] == ["stop", "tool-calls", "stop"]
    assert result.usage.input_tokens == 20 and result.usage.output_tokens == 8
    assert result.text == "Filed."


def test_rule3_no_second_nudge_fails_with_a_typed_error() -> None:
    w = World(output_type=Answer)
    gen = w.core.generate(prepare_prompt("triage").build([]), now=w.driver.now)
    w.driver.start(gen.turn)
    w.send(*prose(3))
    w.driver.start(gen.advance(gen.turn.result(), now=w.driver.now))
    w.send(*prose(5, "Still prose."))
    with pytest.raises(
        StructuredOutputError, match="no structured_output filing after one nudge"
    ) as info:
        gen.advance(gen.turn.result(), now=w.driver.now)
    err = info.value
    assert err.chat_id == CHAT and err.problems == ()
    assert err.result is not None and len(err.result.steps) == 2
    assert w.prompts() == ["triage", NUDGE_PROMPT]


def test_rule3_invalid_filings_report_their_problems() -> None:
    w = World(output_type=Answer)
    gen = w.core.generate(prepare_prompt("triage").build([]), now=w.driver.now)
    w.driver.start(gen.turn)
    w.send(*filed(3, {"severity": "huge", "summary": "x"}))
    # The invalid filing was answered with its validation error (docs/agents.md rule 2), so the
    # model could retry in the loop; here it gives up in prose.
    (submitted,) = [r.json for r in w.driver.requests() if r.op == "submit_tool_results"]
    assert submitted["results"][0]["is_error"] is True
    w.send(*prose(5))
    w.driver.start(gen.advance(gen.turn.result(), now=w.driver.now))
    w.send(*prose(7))
    with pytest.raises(StructuredOutputError, match="no valid structured_output") as info:
        gen.advance(gen.turn.result(), now=w.driver.now)
    assert "$.severity" in info.value.problems[0]


@pytest.mark.parametrize(
    "fields",
    [
        {"finish_reason": "tool-calls"},  # D7 stopped the loop: the chat winds down
        {"settled_by": "promotion"},  # another prompt runs on the chat now
        {"chat_id": None},
    ],
)
def test_rule3_a_chat_that_is_not_idle_is_never_nudged(fields: dict[str, Any]) -> None:
    agent = core(output_type=Answer)
    gen = agent.generate(prepare_prompt("x").build([]), now=0.0)
    gen.turn.cancel(0.0)
    with pytest.raises(
        StructuredOutputError, match=r"^the turn ended with no structured_output filing$"
    ):
        gen.advance(result_with((), **fields), now=0.0)
    assert not gen.nudged


def test_rule4_a_step_limit_landing_on_the_filing_keeps_the_answer() -> None:
    """D7 interrupts the paused chat instead of stranding it; the unexecuted filing still
    carries a valid answer."""
    w = World(output_type=Answer, max_steps=1)
    gen = w.core.generate(prepare_prompt("triage").build([]), now=w.driver.now)
    w.driver.start(gen.turn)
    w.send(*filed(3, {"severity": "critical", "summary": "fire"}))
    w.driver.drain_background()
    turn_result = gen.turn.result()
    assert turn_result.finish_reason == "tool-calls"
    assert [c.tool_call_id for c in turn_result.unexecuted_tool_calls] == ["s1"]
    assert "POST /api/v2/chats/chat-1/interrupt" in w.driver.routes()
    result = gen.advance(turn_result, now=w.driver.now)
    assert isinstance(result, GenerateResult) and result.output == Answer("critical", "fire")


def test_without_output_type_generate_returns_the_turn_result() -> None:
    w = World(tools=[get_weather])
    gen = w.core.generate(prepare_prompt("hi").build([]), now=w.driver.now)
    w.driver.start(gen.turn)
    w.send(*prose(3, "Hello."))
    result = gen.advance(gen.turn.result(), now=w.driver.now)
    assert isinstance(result, GenerateResult) and result.output is None
    assert result.text == "Hello." and result.chat_id == CHAT


def test_stream_results_carry_a_valid_filing_but_are_never_nudged() -> None:
    agent = core(output_type=Answer)
    assert agent.stream_result(result_with((so_call(VALID),))).output == Answer("major", "disk")
    assert agent.stream_result(result_with(())).output is None
    assert core().stream_result(result_with((so_call(VALID),))).output is None


def test_generate_result_keeps_every_turn_result_field() -> None:
    base = result_with((so_call(VALID),), finish_reason="tool-calls", settled_by="promotion")
    result = GenerateResult.from_turn(base, output=1)
    for field in attrs.fields(TurnResult):
        assert getattr(result, field.name) == getattr(base, field.name)
    assert result.output == 1


def test_structured_output_error_pickles() -> None:
    err = StructuredOutputError("m", chat_id="c", problems=["p"])
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.message, copy.chat_id, copy.problems) == ("m", "c", ("p",))
    assert isinstance(copy, CoderAgentError)


# -- history (wire 2) -------------------------------------------------------------------------


def _msg(mid: int) -> dict[str, Any]:
    return {"id": mid, "chat_id": CHAT, "role": "user", "created_at": "", "content": []}


def test_history_walks_newest_first_pages_back_with_before_id() -> None:
    pages = {
        None: {"messages": [_msg(9), _msg(7)], "has_more": True},
        7: {"messages": [_msg(5), _msg(3)], "has_more": True},
        3: {"messages": [_msg(1)], "has_more": False},
    }
    seen: list[int | None] = []

    def http(request: Any) -> Respond:
        query = request.path.partition("?")[2]
        before = None
        for item in query.split("&"):
            if item.startswith("before_id="):
                before = int(item.split("=")[1])
        seen.append(before)
        return Respond(200, pages[before])

    job = HistoryJob(PrefixSelector(), CHAT, now=0.0, page_size=2)
    env_driver = Driver(core().session, http=http)
    messages = env_driver.run(job)
    assert [m.id for m in messages] == [1, 3, 5, 7, 9]
    assert seen == [None, 7, 3]


def test_history_stops_on_a_page_without_new_messages() -> None:
    def http(request: Any) -> Respond:
        return Respond(200, {"messages": [_msg(4)], "has_more": True})

    job = HistoryJob(PrefixSelector(), CHAT, now=0.0)
    messages = Driver(core().session, http=http).run(job)
    assert [m.id for m in messages] == [4]


def test_history_needs_a_chat_id() -> None:
    with pytest.raises(CoderAgentError):
        HistoryJob(PrefixSelector(), "", now=0.0)


# -- bad input never escapes as a bare exception (docs/architecture.md rule 4) -------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=8),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "role",
                    "content",
                    "type",
                    "text",
                    "file_id",
                    "data",
                    "tool_call_id",
                    "output",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(prompt=_values, as_messages=st.booleans())
def test_property_any_prompt_is_a_plan_or_a_typed_error(prompt: Any, as_messages: bool) -> None:
    kwargs = {"messages": prompt} if as_messages else {"prompt": prompt}
    try:
        plan = prepare_prompt(**kwargs)
    except CoderAgentError:
        return
    messages = plan.build([b"x"] * len(plan.reads))
    assert all(
        isinstance(m, SystemMessage | UserMessage | AssistantMessage | ToolMessage)
        for m in messages
    )


_ANSWER_OUTPUT = StructuredOutput(Answer)


@settings(max_examples=200, deadline=None)
@given(
    calls=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["get_weather", "structured_output", "nope"]),
            st.one_of(
                st.text(max_size=20),
                _values.map(lambda v: json.dumps(v, default=str)),
            ),
        ),
        max_size=6,
    )
)
def test_property_d5_every_distinct_call_is_answered_or_run_exactly_once(
    calls: list[tuple[str, str, str]],
) -> None:
    plan = plan_tool_calls(
        [call(name, args, call_id) for call_id, name, args in calls],
        {"get_weather": get_weather},
        structured_output=_ANSWER_OUTPUT,
    )
    answered = [o.tool_call_id for o in plan.outcomes] + [i.tool_call_id for i in plan.invocations]
    assert sorted(answered) == sorted({c[0] for c in calls})
    assert all(o.is_error is False or isinstance(o.output, str) for o in plan.outcomes)
