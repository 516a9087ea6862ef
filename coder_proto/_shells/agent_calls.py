"""The agent's plain operations (wire 2, 7, 8, H.3; D11, D17, D35), defined once for every
adapter: ``interrupt``, ``list_models``, ``get_chat_cost``, ``compact``, ``clear``,
``edit_message``, ``prompts``, ``propose_title``, ``diff``, ``attach``, ``history`` and the
queue's ``queued_messages``, ``edit_queued_message`` and ``promote_queued_message``, each a
``Operation`` that the adapter's ``CoderAgent`` method of the same name and signature performs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._agent.agent_core import AgentCore
from .._agent.prompt_plan import AttachedFile, prepare_attachment
from .._agent.session_calls import ArchiveResult, InterruptResult
from .._rest.routes import ChatCost
from .._wire.chats import Chat, ChatModelConfig
from .._wire.messages import ChatQueuedMessage
from .client_calls import ChatOperations, Operation

if TYPE_CHECKING:
    from .._agent.history import FileUrlResolver, UIMessage
    from .._rest.chat_extras import ChatDiff, ChatPrompt, EditedMessage

__all__ = ["AgentCalls", "AgentOperations"]


class AgentOperations:
    """The agent's plain operations (wire 2, 7, 8, H.3; D11, D17), defined once for every
    adapter: each returns a ``coder_proto._shells.client_calls.Operation`` that the adapter's ``CoderAgent`` method
    of the same name and signature performs (``coder_proto._shells.client_calls.public_method``)."""

    def __init__(self, core: AgentCore) -> None:
        self._core = core

    def __repr__(self) -> str:
        return f"AgentOperations({self._core!r})"

    def _chat_calls(self) -> ChatOperations:
        session = self._core.session
        return ChatOperations(session.selector, session.config.base_url)

    def interrupt(
        self, *, wait: bool = False, timeout: float | None = None
    ) -> Operation[InterruptResult]:
        """Interrupt the session's chat (or the last known one) (H.3, D4): ``interrupted`` is
        ``False`` when there is no chat. With ``wait``, poll until the chat settled, at most
        ``timeout`` seconds (15 by default; builtin ``TimeoutError`` after that, D11). On the
        blocking adapter it may be called from another thread while a turn runs: that turn
        then settles and returns."""
        session = self._core.session
        return Operation(
            machine=lambda now, _data: session.interrupt(now=now, wait=wait, timeout=timeout),
            session=session,
        )

    def archive(self) -> Operation[ArchiveResult]:
        """Archive the session's chat and every stranded one (H.4, D10), retrying 409s while
        the chat winds down, within ``settle_deadline``."""
        session = self._core.session
        return Operation(machine=lambda now, _data: session.archive(now=now), session=session)

    def list_models(self) -> Operation[tuple[ChatModelConfig, ...]]:
        """The organization's model configs (wire 8), to pick a ``model`` hint (the agent's
        organization, else the client's default, D33)."""
        return self._chat_calls().list_model_configs(self._core.organization_id)

    def get_chat_cost(self, chat_id: str | None = None) -> Operation[ChatCost]:
        """The chat's cost (``GET {P}/{chat}/cost``; D17: never called implicitly). Defaults
        to the session's chat, else the last known one."""
        return self._chat_calls().get_chat_cost(chat_id or self._core.require_chat())

    def compact(self) -> Operation[Chat]:
        """Compact the session's chat (or the last known one): the server summarises the
        conversation into a fresh model context, so a long chat can go on (wire 2.4). Returns
        the chat, ``running`` while the summary is written; a ``CoderApiError`` 409 means
        there is nothing to compact or a turn is running."""
        return self._chat_calls().compact_chat(self._core.require_chat())

    def clear(self) -> Operation[Chat]:
        """Clear the model context of the session's chat (or the last known one): the next
        prompt starts afresh, with no model call now; the transcript stays (wire 2.4). A
        ``CoderApiError`` 409 means a turn is running."""
        return self._chat_calls().clear_chat(self._core.require_chat())

    def edit_message(
        self,
        message_id: int,
        content: object,
        *,
        model_config_id: str | None = None,
        reasoning_effort: str | None = None,
    ) -> Operation[EditedMessage]:
        """Replace a user message of the session's chat (or the last known one) and let the
        chat run again from there (wire 2.4): the message and everything after it leave the
        history. The re-run is not streamed here; read it with ``history()`` once the chat
        settles, and a prompt sent meanwhile is queued behind it."""
        return self._chat_calls().edit_chat_message(
            self._core.require_chat(),
            message_id,
            content,
            model_config_id=model_config_id,
            reasoning_effort=reasoning_effort,
        )

    def queued_messages(
        self, chat_id: str | None = None
    ) -> Operation[tuple[ChatQueuedMessage, ...]]:
        """The chat's queue, head first (``GET {P}/{chat}/messages``): the prompts sent while
        it was busy, each with its ``id`` and ``editing_since`` (D35). Defaults to the
        session's chat, else the last known one."""
        call = self._chat_calls().get_messages(chat_id or self._core.require_chat(), limit=1)
        return Operation(machine=call.machine, finish=lambda page: page.queued_messages)

    def edit_queued_message(
        self,
        queued_message_id: int,
        *,
        content: object = None,
        editing: bool | None = None,
        model_config_id: str | None = None,
        reasoning_effort: str | None = None,
        chat_id: str | None = None,
    ) -> Operation[None]:
        """Edit a queued message of the chat (D35; the client's ``edit_queued_message``):
        new ``content``, ``editing=True`` to begin an edit (a run that ends while the queue
        head is under edit leaves the chat ``paused`` instead of sending it) and
        ``editing=False`` to end it (a paused chat then sends it). Defaults to the session's
        chat, else the last known one."""
        return self._chat_calls().edit_queued_message(
            chat_id or self._core.require_chat(),
            queued_message_id,
            content=content,
            editing=editing,
            model_config_id=model_config_id,
            reasoning_effort=reasoning_effort,
        )

    def prompts(self, *, limit: int | None = None) -> Operation[tuple[ChatPrompt, ...]]:
        """The user's prompts in the session's chat (or the last known one), newest first
        (wire 2.4)."""
        return self._chat_calls().get_chat_prompts(self._core.require_chat(), limit=limit)

    def propose_title(self) -> Operation[str]:
        """A title the server suggests for the session's chat (or the last known one); not
        stored (wire 2.4)."""
        return self._chat_calls().propose_chat_title(self._core.require_chat())

    def diff(self) -> Operation[ChatDiff]:
        """The diff of the workspace changes made in the session's chat (or the last known
        one) (wire 2.4)."""
        return self._chat_calls().get_chat_diff(self._core.require_chat())

    def promote_queued_message(
        self, queued_message_id: int, *, chat_id: str | None = None
    ) -> Operation[None]:
        """Send a queued message of the chat now (the client's ``promote_queued_message``;
        a paused chat resumes with it, D35). Defaults to the session's chat, else the last
        known one."""
        return self._chat_calls().promote_queued_message(
            chat_id or self._core.require_chat(), queued_message_id
        )

    def attach(
        self, content: object, *, media_type: str | None = None, filename: str | None = None
    ) -> Operation[AttachedFile]:
        """Upload a file once (wire 7: allowlisted media types, 10 MiB) and return a reference
        to put in later prompts without re-uploading. ``content`` is bytes, a path or a binary
        file object; the media type defaults from the file name's extension."""
        plan = prepare_attachment(content, media_type=media_type, filename=filename)
        kind = plan.media_type
        assert kind is not None
        name = plan.filename
        upload = self._chat_calls().upload(
            self._core.organization_id, content, media_type=kind, filename=name
        )
        return Operation(
            machine=upload.machine,
            read=upload.read,
            finish=lambda file_id: AttachedFile(file_id=file_id, media_type=kind, filename=name),
        )

    def history(self, *, file_url: FileUrlResolver | None = None) -> Operation[list[UIMessage]]:
        """The chat's whole history as UI messages (state machines I), oldest first."""
        # The history machine and the UI messages are imported by the first history asked for.
        from .._agent.history import HistoryJob, to_ui_messages

        core = self._core
        chat_id = core.require_chat()
        selector = core.session.selector
        return Operation(
            machine=lambda now, _data: HistoryJob(selector, chat_id, now=now),
            finish=lambda messages: to_ui_messages(messages, file_url=file_url),
        )


#: The earlier name of ``AgentOperations`` (``coder_proto.adapter`` still exports it).
AgentCalls = AgentOperations
