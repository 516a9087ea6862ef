"""Images and files in LangChain messages sent through ``ChatCoder``: every form LangChain
gives them becomes a file part of the chat's user message, in order, each content uploaded
once per call; what cannot become a Coder chat attachment is refused before any request."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import BaseModel

from coder_integrations.fake_server import FakeCoderServer
from coder_integrations.pytest_plugin import FakeCoder
from coder_io_asyncio import CoderAgentError
from coder_io_asyncio.integrations.langchain import ChatCoder
from coder_io_sync import CoderChatClient

from .media import PDF, PDF_B64, PNG, PNG_B64, user_messages

pytestmark = pytest.mark.anyio

LOOK = {"type": "text", "text": "Look at this"}


def _chat_id(message: Any) -> str:
    chat_id = message.response_metadata["coder_chat_id"]
    assert isinstance(chat_id, str)
    return chat_id


@pytest.mark.parametrize(
    ("block", "media_type", "data"),
    [
        ({"type": "image", "base64": PNG_B64, "mime_type": "image/png"}, "image/png", PNG),
        ({"type": "image", "url": f"data:image/png;base64,{PNG_B64}"}, "image/png", PNG),
        (
            {"type": "file", "base64": PDF_B64, "extras": {"filename": "doc.pdf"}},
            "application/pdf",
            PDF,
        ),
        (
            {"type": "image", "source_type": "base64", "data": PNG_B64, "mime_type": "image/png"},
            "image/png",
            PNG,
        ),
        (
            {"type": "file", "source_type": "url", "url": f"data:application/pdf;base64,{PDF_B64}"},
            "application/pdf",
            PDF,
        ),
        (
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
            },
            "image/png",
            PNG,
        ),
        ({"type": "image_url", "image_url": f"data:image/png;base64,{PNG_B64}"}, "image/png", PNG),
        (
            {"type": "file", "file": {"file_data": PDF_B64, "filename": "report.pdf"}},
            "application/pdf",
            PDF,
        ),
        ({"type": "text-plain", "text": "plain notes"}, "text/plain", b"plain notes"),
        ({"type": "file", "url": "data:text/plain,a%20note"}, "text/plain", b"a note"),
    ],
    ids=[
        "standard-base64",
        "standard-data-url",
        "standard-file-named",
        "source-type-base64",
        "source-type-data-url",
        "anthropic-source",
        "openai-image-url-string",
        "openai-file-raw-base64",
        "text-plain",
        "data-url-percent-encoded",
    ],
)
def test_every_form_of_content_becomes_a_file_of_the_user_message(
    model: ChatCoder,
    coder_server: FakeCoderServer,
    block: dict[str, Any],
    media_type: str,
    data: bytes,
) -> None:
    answer = model.invoke([HumanMessage([LOOK, block])])
    assert user_messages(coder_server, _chat_id(answer)) == [
        [("text", "Look at this"), (media_type, data)]
    ]


@pytest.mark.parametrize(
    "reference",
    [
        lambda file_id: {"type": "file", "file_id": file_id},
        lambda file_id: {"type": "image", "source_type": "id", "id": file_id},
        lambda file_id: {"type": "file", "file": {"file_id": file_id}},
    ],
    ids=["standard", "source-type", "openai"],
)
def test_a_block_naming_a_coder_file_sends_that_file_without_uploading(
    model: ChatCoder, coder_server: FakeCoderServer, fake: FakeCoder, reference: Any
) -> None:
    client = CoderChatClient(base_url=coder_server.url, token=coder_server.token)
    try:
        file_id = client.upload_chat_file(
            coder_server.organization_id, PNG, media_type="image/png", filename="dot.png"
        )
    finally:
        client.close()
    uploads = len(fake.requests("upload_chat_file"))
    answer = model.invoke([HumanMessage([LOOK, reference(file_id)])])
    assert user_messages(coder_server, _chat_id(answer)) == [
        [("text", "Look at this"), ("image/png", PNG)]
    ]
    assert len(fake.requests("upload_chat_file")) == uploads


def test_files_keep_their_place_and_each_content_is_uploaded_once(
    model: ChatCoder, coder_server: FakeCoderServer, fake: FakeCoder
) -> None:
    image = {"type": "image", "base64": PNG_B64, "mime_type": "image/png"}
    uploads = len(fake.requests("upload_chat_file"))
    answer = model.invoke(
        [
            HumanMessage(
                [
                    "First:",
                    image,
                    {"type": "text", "text": "then:"},
                    {"type": "file", "base64": PDF_B64, "mime_type": "application/pdf"},
                    {"type": "text", "text": "and again:"},
                    dict(image),
                ]
            ),
        ]
    )
    assert user_messages(coder_server, _chat_id(answer)) == [
        [
            ("text", "First:"),
            ("image/png", PNG),
            ("text", "then:"),
            ("application/pdf", PDF),
            ("text", "and again:"),
            ("image/png", PNG),
        ]
    ]
    assert len(fake.requests("upload_chat_file")) == uploads + 2


def test_a_conversation_sends_the_files_of_its_new_message(
    model: ChatCoder, coder_server: FakeCoderServer
) -> None:
    first = model.invoke("Echo hello")
    image = {"type": "image", "base64": PNG_B64, "mime_type": "image/png"}
    second = model.invoke([HumanMessage("Echo hello"), first, HumanMessage([LOOK, image])])
    assert _chat_id(second) == _chat_id(first)
    assert user_messages(coder_server, _chat_id(first)) == [
        [("text", "Echo hello")],
        [("text", "Look at this"), ("image/png", PNG)],
    ]


def test_a_transcript_for_a_new_chat_attaches_the_files_of_earlier_turns(
    model: ChatCoder, coder_server: FakeCoderServer
) -> None:
    image = {"type": "image", "base64": PNG_B64, "mime_type": "image/png"}
    answer = model.invoke(
        [HumanMessage([LOOK, image]), AIMessage("A red dot."), HumanMessage("And now?")]
    )
    ((intro, file, rest),) = user_messages(coder_server, _chat_id(answer))
    assert intro == ("text", "The conversation so far:\nuser: Look at this")
    assert file == ("image/png", PNG)
    assert rest == ("text", "assistant: A red dot.\n\nAnd now?")


async def test_async_calls_and_streams_send_files(
    model: ChatCoder, coder_server: FakeCoderServer
) -> None:
    image = {"type": "image", "base64": PNG_B64, "mime_type": "image/png"}
    answer = await model.ainvoke([HumanMessage([LOOK, image])])
    chunks = [c async for c in model.astream([HumanMessage([LOOK, image])])]
    streamed = chunks[-1]
    for message in (answer, streamed):
        assert user_messages(coder_server, _chat_id(message)) == [
            [("text", "Look at this"), ("image/png", PNG)]
        ]
    synced = list(model.stream([HumanMessage([LOOK, image])]))[-1]
    assert user_messages(coder_server, _chat_id(synced)) == [
        [("text", "Look at this"), ("image/png", PNG)]
    ]


class Caption(BaseModel):
    """A caption for the image."""

    caption: str


def test_structured_output_sends_the_files(model: ChatCoder, coder_server: FakeCoderServer) -> None:
    image = {"type": "image", "base64": PNG_B64, "mime_type": "image/png"}
    raw = model.with_structured_output(Caption, include_raw=True).invoke(
        [HumanMessage([LOOK, image])]
    )
    assert isinstance(raw, dict)
    sent = user_messages(coder_server, _chat_id(raw["raw"]))
    assert sent[0] == [("text", "Look at this"), ("image/png", PNG)]


_OVERSIZE = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(10 * 1024 * 1024)).decode()


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (
            HumanMessage([LOOK, {"type": "image", "base64": PNG_B64, "mime_type": "image/bmp"}]),
            'Media type "image/bmp" is not allowed for chat attachments',
        ),
        (
            HumanMessage([LOOK, {"type": "file", "base64": PDF_B64}]),
            "Could not determine the file's media type",
        ),
        (
            HumanMessage([LOOK, {"type": "image", "base64": _OVERSIZE, "mime_type": "image/png"}]),
            "over the 10485760-byte \\(10 MiB\\) chat attachment limit",
        ),
        (
            HumanMessage(
                [LOOK, {"type": "image", "url": "https://example.com/cat.png?token=s3cret"}]
            ),
            r"URL \(https://example.com\.\.\.\) cannot be sent to a Coder chat: ChatCoder does "
            "not fetch URLs",
        ),
        (
            HumanMessage(
                [LOOK, {"type": "image", "source": {"type": "url", "url": "http://cats.test/a"}}]
            ),
            r"URL \(http://cats.test\.\.\.\) cannot be sent",
        ),
        (
            HumanMessage([LOOK, {"type": "image_url", "image_url": {"url": "file:cat.png"}}]),
            r"URL \(file:\.\.\.\) cannot be sent",
        ),
        (
            HumanMessage([LOOK, {"type": "audio", "base64": "AAAA", "mime_type": "audio/wav"}]),
            "'audio' content block cannot be sent to a Coder chat: Coder chat attachments take "
            "no audio or video",
        ),
        (
            HumanMessage([LOOK, {"type": "input_audio", "input_audio": {"data": "AAAA"}}]),
            "'input_audio' content block cannot be sent",
        ),
        (
            HumanMessage(
                [LOOK, {"type": "image", "base64": "not base64!", "mime_type": "image/png"}]
            ),
            "not valid base64",
        ),
        (
            HumanMessage([LOOK, {"type": "image", "base64": "", "mime_type": "image/png"}]),
            "holds no base64 content",
        ),
        (
            HumanMessage([LOOK, {"type": "image", "mime_type": "image/png"}]),
            "holds no content: give base64 or a data: URL",
        ),
        (
            HumanMessage([LOOK, {"type": "image", "url": "data:image/png;base64"}]),
            "a data: URL without a comma holds no content",
        ),
        (
            HumanMessage([LOOK, {"type": "file", "file_id": "file-abc123"}]),
            "file id 'file-abc123' names no Coder chat file",
        ),
    ],
    ids=[
        "media-type",
        "no-media-type",
        "oversize",
        "remote-url",
        "anthropic-url",
        "other-url",
        "audio",
        "openai-audio",
        "bad-base64",
        "empty-base64",
        "no-content",
        "data-url-without-comma",
        "foreign-file-id",
    ],
)
def test_content_that_cannot_be_attached_is_refused_before_any_request(
    model: ChatCoder, fake: FakeCoder, message: HumanMessage, error: str
) -> None:
    before = len(fake.requests())
    with pytest.raises(CoderAgentError, match=error) as raised:
        model.invoke([message])
    assert len(fake.requests()) == before  # no chat, no upload: nothing to lose
    assert "s3cret" not in str(raised.value)


@pytest.mark.parametrize(
    ("messages", "role"),
    [
        (
            [
                SystemMessage([{"type": "image", "base64": PNG_B64, "mime_type": "image/png"}]),
                HumanMessage("Hi"),
            ],
            "system",
        ),
        (
            [
                HumanMessage("Hi"),
                AIMessage([{"type": "image", "base64": PNG_B64, "mime_type": "image/png"}]),
                HumanMessage("Again"),
            ],
            "ai",
        ),
        (
            [
                HumanMessage("Hi"),
                AIMessage("", tool_calls=[{"name": "draw", "args": {}, "id": "c1"}]),
                ToolMessage(
                    [{"type": "image", "base64": PNG_B64, "mime_type": "image/png"}],
                    tool_call_id="c1",
                ),
            ],
            "tool",
        ),
    ],
    ids=["system", "assistant", "tool"],
)
def test_only_user_messages_carry_files(
    model: ChatCoder, fake: FakeCoder, messages: list[Any], role: str
) -> None:
    before = len(fake.requests())
    with pytest.raises(
        CoderAgentError, match=f"only user messages carry images and files, not {role}"
    ):
        model.invoke(messages)
    assert len(fake.requests()) == before
