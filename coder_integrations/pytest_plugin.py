"""A pytest plugin for testing code built on coder-agents against a fake Coder deployment.

Installing the package registers it (the ``pytest11`` entry point ``coder_agents``); nothing
is imported until a test uses one of its fixtures. Fixtures:

* ``coder_fake``: a fake Coder server on loopback for one test (a ``FakeCoder``: its URL and
  token, the script book, fault injection, and what it received); ``coder_fake_session``: one
  for the whole session;
* ``coder_connection``: ``base_url``, ``token`` and ``organization_id`` of ``coder_fake``, to
  pass to your own ``CoderAgent(...)`` / ``CoderChatClient(...)``;
* ``coder_agent`` / ``coder_client``: an agent / client bound to ``coder_fake`` on the async
  runtime of the test (asyncio or trio, chosen by anyio's ``anyio_backend``; mark the test
  ``@pytest.mark.anyio``); ``coder_sync_agent`` / ``coder_sync_client``: the blocking ones.
  Agents are closed (their chat interrupted and archived) when the test ends;
* ``coder_script_book``: override it (in a ``conftest.py``) to give every ``coder_fake`` a
  ``ScriptBook`` (or its JSON form).

Markers:

* ``@pytest.mark.coder_script(*items, match=None)``: what the fake model does: with
  ``match`` (a regular expression) for prompts that match it, otherwise for every prompt; the
  items are ``Say``, ``Think``, ``CallClientTool`` ... (``coder_proto.fake``) or one
  ``Script``. Several markers add several rules;
* ``@pytest.mark.coder_fake(**overrides)``: ``FakeConfig`` fields of the test's fake (for
  example ``chunk_delay=0.01``);
* ``@pytest.mark.coder_agent(**kwargs)``: keyword arguments of the ``coder_agent`` /
  ``coder_sync_agent`` fixtures (``tools=[...]``, ``instructions=...``, ``model=...``).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from coder_integrations.fake_server import FakeCoderServer
    from coder_proto.fake import FakeChat, Faults, Script, ScriptBook

__all__ = ["FAST_FAKE", "FakeCoder"]

FAST_FAKE: Mapping[str, Any] = {"chunk_delay": 0.0005, "interrupt_delay": 0.05}
"""The fake's knobs in tests: stream almost at once, wind an interrupt down quickly."""


def _server_class() -> type[FakeCoderServer]:
    from coder_integrations.fake_server import FakeCoderServer

    return FakeCoderServer


def _name(predicate: Callable[[], Any]) -> str:
    return getattr(predicate, "__qualname__", None) or repr(predicate)


def _as_script(items: tuple[Any, ...]) -> Script:
    from coder_proto.fake import Script

    if len(items) == 1 and isinstance(items[0], Script):
        return items[0]
    if len(items) == 1 and isinstance(items[0], Mapping):
        return Script.from_json(items[0])
    return Script(items)


class _Tracked:
    """A scripted answer that notes when a turn used it (a script factory of the book)."""

    def __init__(self, script: Script, label: str) -> None:
        self.script = script
        self.label = label
        self.used = False

    def __call__(self, ctx: Any) -> Script:
        self.used = True
        return self.script


class FakeCoder:
    """A running fake Coder deployment, as the fixtures hand it to a test.

    ``url``, ``token`` and ``organization_id`` are what a client needs (``connection()``
    gives them as keyword arguments). ``script`` / ``push`` / ``use_book`` decide what the
    fake model does; ``faults`` injects failures (``drop_stream_at``, ``drop_stream_after_frames``,
    ``reject_upgrades``, ``fail_requests``, ``delay_requests`` ...; see ``Faults``);
    ``prompts``, ``tool_results``, ``interrupts``, ``archived_chat_ids`` and the
    ``assert_*`` methods tell what it received. ``server`` is the ``FakeCoderServer``.
    Every method is safe while clients are connected.
    """

    def __init__(self, server: FakeCoderServer) -> None:
        self.server = server
        #: When true, the end of the test does not check that every script given through
        #: ``script``, ``push`` or the ``coder_script`` marker was used (the
        #: ``coder_allow_unused_scripts`` marker sets it).
        self.allow_unused_scripts = False
        self._scripted: list[_Tracked] = []
        self._pushed: list[Script] = []

    def __repr__(self) -> str:
        return f"<FakeCoder {self.url}>"

    # -- connecting -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def token(self) -> str:
        return self.server.token

    @property
    def organization_id(self) -> str:
        return self.server.organization_id

    def connection(self) -> dict[str, str]:
        """``base_url``, ``token`` and ``organization_id``: ``CoderAgent(**fake.connection())``."""
        return {"base_url": self.url, "token": self.token, "organization_id": self.organization_id}

    # -- scripting ------------------------------------------------------------------------------

    def script(self, *items: Any, match: str | None = None) -> Script:
        """What the model does: for prompts matching the regular expression ``match`` (checked
        in the order the rules were added), or, without ``match``, for every prompt no rule
        matches. ``items`` are script items or one ``Script`` (or its JSON form)."""
        script = _as_script(items)
        label = "every prompt" if match is None else f"prompts matching {match!r}"
        tracked = _Tracked(script, label)
        self._scripted.append(tracked)
        if match is None:
            self.server.config.scripts.default = tracked
        else:
            self.server.config.scripts.add(match, tracked)
        return script

    def push(self, *items: Any) -> Script:
        """A script for the next prompt only (whatever it says)."""
        script = _as_script(items)
        self._pushed.append(script)
        self.server.config.scripts.push(script)
        return script

    def use_book(self, book: ScriptBook | Mapping[str, Any]) -> None:
        """Replace the whole script book (a ``ScriptBook`` or its JSON form)."""
        from coder_proto.fake import ScriptBook

        if not isinstance(book, ScriptBook):
            book = ScriptBook.from_json(book)
        self.server.config.scripts = book

    def unused_scripts(self) -> list[str]:
        """What the test scripted and no turn used: one description each (empty when every
        script of ``script``, ``push`` and the ``coder_script`` marker answered a prompt; a
        book given whole, by ``use_book`` or ``coder_script_book``, is not checked)."""
        unused = [f"the script for {t.label}" for t in self._scripted if not t.used]
        waiting = self.server.config.scripts.waiting()
        pushed = [s for s in self._pushed if any(s is w for w in waiting)]
        unused += ["a pushed script (for the next prompt)"] * len(pushed)
        return unused

    @property
    def faults(self) -> Faults:
        """The fault injector (changes apply to connected clients at once)."""
        return self.server.faults

    # -- what the fake received -------------------------------------------------------------------

    @property
    def chats(self) -> list[FakeChat]:
        """Every chat, in creation order."""
        return list(self.server.model.chats.values())

    def chat(self, chat_id: str | None = None) -> FakeChat:
        """The chat ``chat_id``, or the only chat when ``None`` (an ``AssertionError`` when
        there is not exactly one)."""
        __tracebackhide__ = True
        chats = self.server.model.chats
        if chat_id is not None:
            if chat_id not in chats:
                raise AssertionError(f"the fake has no chat {chat_id!r}")
            return chats[chat_id]
        if len(chats) != 1:
            raise AssertionError(f"expected exactly one chat on the fake, found {len(chats)}")
        return next(iter(chats.values()))

    def _chats(self, chat_id: str | None) -> list[FakeChat]:
        return [self.chat(chat_id)] if chat_id is not None else self.chats

    def prompts(self, chat_id: str | None = None) -> list[str]:
        """The text of every user message (of one chat, or of all in creation order)."""
        out = []
        for chat in self._chats(chat_id):
            for message in list(chat.messages):
                if message.role == "user" and not message.deleted:
                    texts = [p.get("text", "") for p in message.content if p.get("type") == "text"]
                    out.append("".join(texts))
        return out

    def tool_results(self, chat_id: str | None = None) -> list[dict[str, Any]]:
        """The client tool results the fake received, in order: ``tool_call_id``,
        ``tool_name``, ``output`` and ``is_error`` (server tools' results are not included)."""
        out = []
        for chat in self._chats(chat_id):
            client_tools = {str(t.get("name")) for t in chat.dynamic_tools}
            for message in list(chat.messages):
                if message.role != "tool" or message.deleted:
                    continue
                for part in message.content:
                    if part.get("type") == "tool-result" and part.get("tool_name") in client_tools:
                        out.append(
                            {
                                "tool_call_id": part.get("tool_call_id"),
                                "tool_name": part.get("tool_name"),
                                "output": part.get("result"),
                                "is_error": bool(part.get("is_error")),
                            }
                        )
        return out

    def requests(self, op: str | None = None) -> list[Any]:
        """The requests the fake answered (``RequestRecord``: ``method``, ``path``, ``op``,
        ``status``), optionally only those of one operation (``create_chat``,
        ``interrupt_chat``, ``submit_tool_results``, ``update_chat`` ...)."""
        log = self.server.counters.request_log
        return [r for r in log if op is None or r.op == op]

    def interrupts(self, chat_id: str | None = None) -> int:
        """How many interrupt requests the fake received (for one chat, or in all)."""
        records = self.requests("interrupt_chat")
        if chat_id is None:
            return len(records)
        return sum(1 for r in records if f"/{chat_id}/interrupt" in r.path)

    def archived_chat_ids(self) -> list[str]:
        """The chats that are archived now."""
        return [chat.id for chat in self.chats if chat.archived]

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until no client connection is open (``False`` after ``timeout`` seconds)."""
        return self.server.wait_idle(timeout)

    def wait_until(self, predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Block until ``predicate()`` is true and return its value (an ``AssertionError``
        after ``timeout`` seconds). For effects a client sends in the background, such as
        the interrupt that leaving a stream early fires: ``fake.wait_until(fake.interrupts)``.
        From async code use ``until``: blocking here would stall the client's event loop."""
        __tracebackhide__ = True
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            if time.monotonic() >= deadline:
                raise AssertionError(f"{_name(predicate)} stayed false for {timeout} s")
            time.sleep(0.005)
        return value

    async def until(self, predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
        """``wait_until`` for async tests (asyncio or trio): sleeps without blocking."""
        __tracebackhide__ = True
        import anyio

        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            if time.monotonic() >= deadline:
                raise AssertionError(f"{_name(predicate)} stayed false for {timeout} s")
            await anyio.sleep(0.005)
        return value

    # -- assertions ---------------------------------------------------------------------------------

    def assert_prompted(self, pattern: str, *, chat_id: str | None = None) -> str:
        """A user message matched the regular expression ``pattern``; returns it."""
        __tracebackhide__ = True
        prompts = self.prompts(chat_id)
        for prompt in prompts:
            if re.search(pattern, prompt):
                return prompt
        raise AssertionError(f"no prompt matches {pattern!r}; the fake received {prompts!r}")

    def assert_tool_result(
        self, tool_name: str, output: Any = ..., *, is_error: bool | None = None
    ) -> dict[str, Any]:
        """A client tool result for ``tool_name`` arrived (with this ``output`` and error flag
        when given); returns it."""
        __tracebackhide__ = True
        results = self.tool_results()
        for result in results:
            if result["tool_name"] != tool_name:
                continue
            if output is not ... and result["output"] != output:
                continue
            if is_error is not None and result["is_error"] != is_error:
                continue
            return result
        wanted = tool_name if output is ... else f"{tool_name} -> {output!r}"
        raise AssertionError(f"no tool result {wanted}; the fake received {results!r}")

    def assert_interrupted(self, chat_id: str | None = None) -> None:
        """An interrupt request reached the fake (for ``chat_id``, or for the only chat)."""
        __tracebackhide__ = True
        target = self.chat(chat_id).id
        if not self.interrupts(target):
            raise AssertionError(f"chat {target} was never interrupted")

    def assert_not_interrupted(self, chat_id: str | None = None) -> None:
        __tracebackhide__ = True
        target = self.chat(chat_id).id
        count = self.interrupts(target)
        if count:
            raise AssertionError(f"chat {target} was interrupted {count} time(s)")

    def assert_archived(self, chat_id: str | None = None) -> None:
        """The chat (``chat_id``, or the only one) is archived."""
        __tracebackhide__ = True
        chat = self.chat(chat_id)
        if not chat.archived:
            raise AssertionError(f"chat {chat.id} is not archived")

    def assert_not_archived(self, chat_id: str | None = None) -> None:
        __tracebackhide__ = True
        chat = self.chat(chat_id)
        if chat.archived:
            raise AssertionError(f"chat {chat.id} is archived")


# -- hooks --------------------------------------------------------------------------------------


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Note a test whose body failed: its unused scripts are not reported on top."""
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_CALL_FAILED] = True
    return report


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "coder_script(*items, match=None): what the fake Coder model does in this test",
    )
    config.addinivalue_line(
        "markers", "coder_fake(**overrides): FakeConfig fields of this test's fake Coder server"
    )
    config.addinivalue_line(
        "markers", "coder_agent(**kwargs): keyword arguments of the coder_agent fixtures"
    )
    config.addinivalue_line(
        "markers",
        "coder_allow_unused_scripts: a script of this test that no prompt used does not fail it",
    )


# -- fixtures -----------------------------------------------------------------------------------


def _start(overrides: Mapping[str, Any]) -> FakeCoderServer:
    server = _server_class()(**{**FAST_FAKE, **overrides})
    server.start()
    return server


@pytest.fixture
def coder_script_book() -> ScriptBook | Mapping[str, Any] | None:
    """The script book of every ``coder_fake`` (``None``: the fake's default behaviour).
    Override it in a ``conftest.py``."""
    return None


@pytest.fixture
def coder_fake(request: pytest.FixtureRequest, coder_script_book: Any) -> Iterator[FakeCoder]:
    """A fake Coder server for this test, with the ``coder_fake`` and ``coder_script``
    markers applied; stopped when the test ends."""
    overrides: dict[str, Any] = {}
    for marker in reversed(list(request.node.iter_markers("coder_fake"))):
        if marker.args:
            raise TypeError("coder_fake takes keyword arguments only")
        overrides.update(marker.kwargs)
    server = _start(overrides)
    try:
        fake = FakeCoder(server)
        if coder_script_book is not None:
            fake.use_book(coder_script_book)
        # Closest marker last, so a test's own rules come first among equal patterns.
        for marker in reversed(list(request.node.iter_markers("coder_script"))):
            unknown = set(marker.kwargs) - {"match"}
            if unknown:
                raise TypeError(f"coder_script got unexpected arguments {sorted(unknown)}")
            fake.script(*marker.args, match=marker.kwargs.get("match"))
        fake.allow_unused_scripts = (
            request.node.get_closest_marker("coder_allow_unused_scripts") is not None
        )
        yield fake
        failed = request.node.stash.get(_CALL_FAILED, False)
        unused = [] if fake.allow_unused_scripts or failed else fake.unused_scripts()
        if unused:
            pytest.fail(
                "the test scripted answers no prompt used: "
                + "; ".join(unused)
                + " (mark the test @pytest.mark.coder_allow_unused_scripts, or set "
                "coder_fake.allow_unused_scripts = True, if that is intended)",
                pytrace=False,
            )
    finally:
        server.stop()


@pytest.fixture(scope="session")
def coder_fake_session() -> Iterator[FakeCoder]:
    """One fake Coder server for the whole session (scripts, faults and chats accumulate:
    match scripts on prompts your tests keep distinct)."""
    server = _start({})
    try:
        yield FakeCoder(server)
    finally:
        server.stop()


@pytest.fixture
def coder_connection(coder_fake: FakeCoder) -> dict[str, str]:
    """``base_url``, ``token`` and ``organization_id`` of ``coder_fake``."""
    return coder_fake.connection()


def _agent_kwargs(request: pytest.FixtureRequest) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for marker in reversed(list(request.node.iter_markers("coder_agent"))):
        if marker.args:
            raise TypeError("coder_agent takes keyword arguments only")
        kwargs.update(marker.kwargs)
    return kwargs


def _async_adapter(anyio_backend: Any) -> Any:
    name = anyio_backend if isinstance(anyio_backend, str) else anyio_backend[0]
    if name == "asyncio":
        import coder_io_asyncio

        return coder_io_asyncio
    if name == "trio":
        import coder_io_trio

        return coder_io_trio
    raise ValueError(f"no coder-agents adapter for the anyio backend {name!r}")


@pytest.fixture
async def coder_client(coder_fake: FakeCoder, anyio_backend: Any) -> AsyncIterator[Any]:
    """A ``CoderChatClient`` of the test's async runtime, bound to ``coder_fake``."""
    adapter = _async_adapter(anyio_backend)
    async with adapter.CoderChatClient(coder_fake.url, coder_fake.token) as client:
        yield client


@pytest.fixture
async def coder_agent(
    request: pytest.FixtureRequest, coder_fake: FakeCoder, anyio_backend: Any
) -> AsyncIterator[Any]:
    """A ``CoderAgent`` of the test's async runtime, bound to ``coder_fake``, with the
    ``coder_agent`` marker's keyword arguments; closed (interrupted, archived) at the end."""
    adapter = _async_adapter(anyio_backend)
    async with adapter.CoderAgent(**{**coder_fake.connection(), **_agent_kwargs(request)}) as agent:
        yield agent


@pytest.fixture
def coder_sync_client(coder_fake: FakeCoder) -> Iterator[Any]:
    """A blocking ``CoderChatClient`` bound to ``coder_fake``."""
    import coder_io_sync

    with coder_io_sync.CoderChatClient(coder_fake.url, coder_fake.token) as client:
        yield client


@pytest.fixture
def coder_sync_agent(request: pytest.FixtureRequest, coder_fake: FakeCoder) -> Iterator[Any]:
    """A blocking ``CoderAgent`` bound to ``coder_fake`` (see ``coder_agent``)."""
    import coder_io_sync

    with coder_io_sync.CoderAgent(**{**coder_fake.connection(), **_agent_kwargs(request)}) as agent:
        yield agent
