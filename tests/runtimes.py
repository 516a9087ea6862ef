"""The three runtimes, given to every test the same way: one facade per adapter, so a
scenario is written once and runs on asyncio, trio and the blocking adapter.

A scenario is an ``async def scenario(rt)`` that touches the library only through ``await
rt.<method>(...)``. ``rt.run(scenario)`` runs it: ``asyncio.run`` for the asyncio facade;
``trio.run`` for the trio facade; and for the blocking adapter a facade whose ``async``
methods call blocking functions and never suspend, so the coroutine is driven with
``coro.send(None)`` and no event loop at all. Tool functions in scenarios are plain
functions, which every adapter runs. The asyncio and trio facades share the adapters' API
(the same on both, awaited) and each brings its own runtime's control: running, a caller's
deadline (``bounded``, ``within``), cancellation, concurrency, sleeping and polling.

Every facade records what the library hands back (agents, results, parts, errors) and the
transport events it emits, in a ``Recorder``, so a test can check that the session token
never shows up in any of it. ``tests/conftest.py`` gives them as fixtures: ``runtime`` (the
three), ``loop_runtime`` (asyncio and trio) and ``recorder``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

import attrs
import httpx
import trio

import coder_io_asyncio
import coder_io_sync
import coder_io_trio
from coder_integrations.fake_server import FakeCoderServer
from coder_proto import TextDelta

T = TypeVar("T")

Thunk = Callable[[], Awaitable[Any]]


@contextlib.contextmanager
def _ctrl_c_when(when: Callable[[], bool]) -> Iterator[None]:
    """Ctrl-C for the block: SIGINT to the main thread (which runs the block) as soon as
    ``when()`` holds; the watching thread is stopped and joined when the block ends."""
    main = threading.main_thread()
    assert threading.current_thread() is main, "Ctrl-C reaches the main thread only"
    ident = main.ident
    assert ident is not None
    stop = threading.Event()

    def interrupt() -> None:
        while not stop.is_set():
            if when():
                signal.pthread_kill(ident, signal.SIGINT)
                return
            time.sleep(0.005)

    killer = threading.Thread(target=interrupt, daemon=True)
    killer.start()
    try:
        yield
    finally:
        stop.set()
        killer.join()


@attrs.define
class Recorder:
    """Renderings of everything a scenario saw, for the token check."""

    events: list[Any] = attrs.Factory(list)
    seen: list[str] = attrs.Factory(list)

    def event(self, event: Any) -> None:
        self.events.append(event)

    def note(self, value: Any) -> None:
        self.seen.append(repr(value))
        if isinstance(value, BaseException):
            self.seen.append(str(value))
            self.seen.append("".join(traceback.format_exception(value)))
            for note in getattr(value, "__notes__", ()):
                self.seen.append(str(note))

    def texts(self) -> list[str]:
        return [*self.seen, *(repr(e) for e in self.events)]


@attrs.define
class Streamed:
    """A stream as a consumer saw it: its parts in order, then its final result, or the
    error the iteration raised."""

    parts: list[Any] = attrs.Factory(list)
    result: Any = None
    error: BaseException | None = None

    @property
    def text(self) -> str:
        return "".join(p.delta for p in self.parts if type(p) is TextDelta)

    def of(self, name: str) -> list[Any]:
        return [p for p in self.parts if type(p).__name__ == name]


class _EventLoopRuntime:
    """What the two event-loop facades share: the adapters' API, which is the same on asyncio
    and trio, awaited. Each facade adds its runtime's control (running a scenario, a caller's
    deadline, cancellation, concurrency, sleeping and polling)."""

    name: str
    #: The adapter package (its public names).
    adapter: Any
    #: What a caller's own deadline raises on this runtime (D22).
    deadline_error: type[BaseException]
    #: The runtime's own cancellation, as the canceller sees it (D22).
    cancel_error: type[BaseException]
    agent_class: Any
    client_class: Any

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def bounded(self, seconds: float, method: str, *args: Any, **kwargs: Any) -> Any:
        """``await self.<method>(*args, **kwargs)`` under a caller deadline of ``seconds``
        (the runtime's own: it raises ``deadline_error``). A blocking facade passes
        ``timeout=seconds`` instead."""
        raise NotImplementedError

    async def _observe(self, awaitable: Awaitable[T]) -> T:
        try:
            value = await awaitable
        except BaseException as exc:
            self.recorder.note(exc)
            raise
        self.recorder.note(value)
        return value

    # -- agents --------------------------------------------------------------------------------

    async def agent(self, server: FakeCoderServer, **kwargs: Any) -> Any:
        """A ``CoderAgent`` on ``server`` (its URL, token and organization unless given), with
        the recorder's transport-event hook and a short cleanup retry delay."""
        kwargs.setdefault("base_url", server.url)
        kwargs.setdefault("token", server.token)
        kwargs.setdefault("organization_id", server.organization_id)
        kwargs.setdefault("on_transport_event", self.recorder.event)
        kwargs.setdefault("settle_retry_delay", 0.05)
        try:
            agent = self.agent_class(**kwargs)
        except BaseException as exc:
            self.recorder.note(exc)
            raise
        self.recorder.note(agent)
        return agent

    async def client(self, server: FakeCoderServer, **kwargs: Any) -> Any:
        """A ``CoderChatClient`` on ``server`` (to share between agents, or to pass as
        ``client=``)."""
        kwargs.setdefault("on_transport_event", self.recorder.event)
        client = self.client_class(server.url, server.token, **kwargs)
        self.recorder.note(client)
        return client

    async def close_client(self, client: Any) -> None:
        await client.aclose()

    async def generate(self, agent: Any, prompt: Any = None, **kwargs: Any) -> Any:
        return await self._observe(agent.generate(prompt, **kwargs))

    async def stream(self, agent: Any, prompt: Any = None, **kwargs: Any) -> Streamed:
        """Consume a whole stream part by part, then its final result; a failure of the
        iteration is kept in ``error`` (with the parts delivered before it)."""
        out = Streamed()
        try:
            async with agent.stream(prompt, **kwargs) as stream:
                async for part in stream:
                    self.recorder.note(part)
                    out.parts.append(part)
                out.result = await self._observe(stream.get_final_result())
        except Exception as exc:
            self.recorder.note(exc)
            out.error = exc
        return out

    async def stream_text(self, agent: Any, prompt: Any = None) -> tuple[list[str], Any]:
        """The ``text_stream`` lens, then the final result."""
        async with agent.stream(prompt) as stream:
            deltas = [d async for d in stream.text_stream]
            return deltas, await self._observe(stream.get_final_result())

    async def stream_first(self, agent: Any, prompt: Any, count: int) -> list[Any]:
        """Read ``count`` parts, then leave the stream block (a consumer teardown)."""
        parts: list[Any] = []
        async with agent.stream(prompt) as stream:
            async for part in stream:
                parts.append(part)
                if len(parts) >= count:
                    break
        return parts

    async def generate_within(
        self, agent: Any, prompt: Any, seconds: float
    ) -> BaseException | None:
        """``generate`` under a caller deadline of ``seconds``: the exception the runtime
        raised for it (``None`` when the turn finished first)."""
        return await self.within(seconds, "generate", agent, prompt)

    async def within(
        self, seconds: float, method: str, *args: Any, **kwargs: Any
    ) -> BaseException | None:
        """``await self.<method>(*args, **kwargs)`` under a caller deadline of ``seconds``
        (the runtime's own cancellation): the exception the runtime raised for it, ``None``
        when the call finished first."""
        try:
            await self.bounded(seconds, method, *args, **kwargs)
        except self.deadline_error as exc:
            self.recorder.note(exc)
            return exc
        return None

    async def interrupt(self, agent: Any, **kwargs: Any) -> Any:
        return await self._observe(agent.interrupt(**kwargs))

    async def archive(self, agent: Any) -> Any:
        return await self._observe(agent.archive())

    async def close(self, agent: Any, **kwargs: Any) -> None:
        await agent.aclose(**kwargs)

    async def reset_session(self, agent: Any) -> None:
        agent.reset_session()

    async def attach(self, agent: Any, content: Any, **kwargs: Any) -> Any:
        return await self._observe(agent.attach(content, **kwargs))

    async def list_models(self, agent: Any) -> Any:
        return await self._observe(agent.list_models())

    async def history(self, agent: Any) -> Any:
        return await self._observe(agent.history())

    async def get_chat_cost(self, agent: Any) -> Any:
        return await self._observe(agent.get_chat_cost())

    async def upload_to_workspace(self, agent: Any, content: Any, path: str) -> Any:
        return await self._observe(agent.upload_to_workspace(content, path))

    async def client_call(self, agent: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        """A raw ``CoderChatClient`` operation through ``agent.client``."""
        return await self._observe(getattr(agent.client, name)(*args, **kwargs))

    # -- raw clients and watches -------------------------------------------------------------

    async def call(self, client: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        """``await client.<name>(*args, **kwargs)``, observed."""
        return await self._observe(getattr(client, name)(*args, **kwargs))

    def http_client(
        self, *, on_request: Callable[[httpx.Request], None] | None = None, **kwargs: Any
    ) -> Any:
        """The runtime's httpx client (``httpx.AsyncClient`` here); ``on_request`` is a plain
        function called with every request it sends."""
        if on_request is not None:
            hook = on_request

            async def call_hook(request: httpx.Request) -> None:
                hook(request)

            kwargs["event_hooks"] = {"request": [call_hook]}
        return httpx.AsyncClient(**kwargs)

    async def close_http(self, http: Any) -> None:
        await http.aclose()

    async def enter(self, watch: Any) -> Any:
        """Enter ``watch`` (``async with``) and return it."""
        return await watch.__aenter__()

    async def leave(self, watch: Any) -> None:
        """Leave ``watch``'s ``async with`` block."""
        await watch.__aexit__(None, None, None)

    async def events_until(self, watch: Any, done: Callable[[list[Any]], bool]) -> list[Any]:
        """Iterate ``watch`` until ``done(events so far)``; the watch ending first fails."""
        got: list[Any] = []
        async for event in watch:
            got.append(event)
            if done(got):
                return got
        raise AssertionError("the watch ended")

    async def drain(self, watch: Any) -> list[Any]:
        """Iterate ``watch`` to its end: the events, or what the iteration raised."""
        return [event async for event in watch]

    async def next_event(self, watch: Any) -> Any:
        """One more event (``StopAsyncIteration`` at the end, on every runtime)."""
        return await watch.__anext__()

    async def first_event(self, watch: Any) -> Any:
        """Iterate a watch that was never entered and ``break`` after its first event."""
        async for event in watch:
            return event
        raise AssertionError("the watch ended")

    async def durable(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``await <adapter>.<name>(...)``: ``run_turn``, ``archive_workflow`` or
        ``sweep_orphans``, observed."""
        return await self._observe(getattr(self.adapter, name)(*args, **kwargs))


class AsyncioRuntime(_EventLoopRuntime):
    """The asyncio facade (``coder_io_asyncio``): scenarios run under ``asyncio.run``, a
    caller's deadline is ``asyncio.timeout`` (``TimeoutError``), cancellation is a task's
    ``cancel()``, concurrency is tasks."""

    name = "asyncio"
    adapter: Any = coder_io_asyncio
    deadline_error: type[BaseException] = TimeoutError
    cancel_error: type[BaseException] = asyncio.CancelledError
    agent_class: Any = coder_io_asyncio.CoderAgent
    client_class: Any = coder_io_asyncio.CoderChatClient

    def run(self, scenario: Callable[[AsyncioRuntime], Coroutine[Any, Any, T]]) -> T:
        return asyncio.run(scenario(self))

    async def bounded(self, seconds: float, method: str, *args: Any, **kwargs: Any) -> Any:
        async with asyncio.timeout(seconds):
            return await getattr(self, method)(*args, **kwargs)

    async def cancel_consumer(self, watch: Any, when: Callable[[], bool]) -> bool:
        """Consume ``watch`` and cancel the consumer with the runtime's own cancellation once
        ``when()`` holds: whether that cancellation reached the canceller unwrapped (D22)."""

        async def consume() -> None:
            async for _ in watch:
                pass

        task = asyncio.ensure_future(consume())
        await self.until(when)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    async def cancel_when(
        self, when: Callable[[], bool], method: str, *args: Any, **kwargs: Any
    ) -> BaseException | None:
        """``await self.<method>(...)``, cancelled with the runtime's own cancellation (a
        task's ``cancel()`` here) as soon as ``when()`` holds: the cancellation exception that
        reached the canceller unwrapped (D22), ``None`` when the call finished first."""
        task = asyncio.ensure_future(getattr(self, method)(*args, **kwargs))
        while not task.done() and not when():
            await asyncio.sleep(0.005)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError as exc:
            self.recorder.note(exc)
            return exc
        return None

    async def cancelled_after(self, seconds: float, method: str, *args: Any, **kwargs: Any) -> bool:
        """``await self.<method>(...)``, cancelled with the runtime's own cancellation after
        ``seconds`` (a task's ``cancel()`` here): whether the cancellation propagated
        unwrapped (D22) rather than the call finishing or failing otherwise."""
        task = asyncio.ensure_future(getattr(self, method)(*args, **kwargs))
        await asyncio.sleep(seconds)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    async def watch_within(self, seconds: float, watch: Any) -> BaseException | None:
        """Consume ``watch`` in its ``async with`` under a caller deadline of ``seconds``:
        the exception the runtime raised for it."""
        try:
            async with asyncio.timeout(seconds), watch:
                async for _ in watch:
                    pass
        except TimeoutError as exc:
            return exc
        return None

    # -- control -------------------------------------------------------------------------------

    async def concurrently(self, *thunks: Thunk, stagger: float = 0.0) -> list[Any]:
        """Start each thunk ``stagger`` seconds after the previous one; the values or the
        exceptions, in order."""
        tasks: list[asyncio.Task[Any]] = []
        for index, thunk in enumerate(thunks):
            if index and stagger:
                await asyncio.sleep(stagger)
            tasks.append(asyncio.ensure_future(thunk()))
            await asyncio.sleep(0)
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Poll ``predicate`` until it holds; fail the scenario after ``timeout`` seconds."""
        for _ in range(int(timeout / 0.01)):
            if predicate():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"condition not reached within {timeout} s")

    async def idle(self, server: FakeCoderServer, timeout: float = 5.0) -> bool:
        """True once the server has no open connection."""
        return await asyncio.to_thread(server.wait_idle, timeout)


def _complete(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the blocking facade's) to its value."""
    try:
        coro.send(None)
    except StopIteration as stop:
        value: T = stop.value
        return value
    coro.close()
    raise AssertionError("a scenario on the blocking adapter awaited something that suspends")


class TrioRuntime(_EventLoopRuntime):
    """The trio facade (``coder_io_trio``): scenarios run under ``trio.run``, a caller's
    deadline is ``trio.fail_after`` (``trio.TooSlowError``), cancellation is a cancel scope's,
    concurrency is a nursery."""

    name = "trio"
    adapter: Any = coder_io_trio
    deadline_error: type[BaseException] = trio.TooSlowError
    cancel_error: type[BaseException] = trio.Cancelled
    agent_class: Any = coder_io_trio.CoderAgent
    client_class: Any = coder_io_trio.CoderChatClient

    def run(self, scenario: Callable[[TrioRuntime], Coroutine[Any, Any, T]]) -> T:
        return trio.run(scenario, self)

    async def bounded(self, seconds: float, method: str, *args: Any, **kwargs: Any) -> Any:
        with trio.fail_after(seconds):
            return await getattr(self, method)(*args, **kwargs)

    async def cancel_consumer(self, watch: Any, when: Callable[[], bool]) -> bool:
        cancelled = False

        async def consume() -> None:
            nonlocal cancelled
            try:
                async for _ in watch:
                    pass
            except trio.Cancelled:
                cancelled = True
                raise

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await self.until(when)
            nursery.cancel_scope.cancel()
        return cancelled and nursery.cancel_scope.cancelled_caught

    async def cancel_when(
        self, when: Callable[[], bool], method: str, *args: Any, **kwargs: Any
    ) -> BaseException | None:
        caught: list[BaseException] = []

        async def call() -> None:
            try:
                await getattr(self, method)(*args, **kwargs)
            except trio.Cancelled as exc:
                caught.append(exc)
                raise

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            while not when() and nursery.child_tasks:
                await trio.sleep(0.005)
            nursery.cancel_scope.cancel()
        for exc in caught:
            self.recorder.note(exc)
        return caught[0] if caught and nursery.cancel_scope.cancelled_caught else None

    async def cancelled_after(self, seconds: float, method: str, *args: Any, **kwargs: Any) -> bool:
        cancelled = False

        async def call() -> None:
            nonlocal cancelled
            try:
                await getattr(self, method)(*args, **kwargs)
            except trio.Cancelled:
                cancelled = True
                raise

        with trio.move_on_after(seconds) as scope:
            await call()
        return cancelled and scope.cancelled_caught

    async def watch_within(self, seconds: float, watch: Any) -> BaseException | None:
        try:
            with trio.fail_after(seconds):
                async with watch:
                    async for _ in watch:
                        pass
        except trio.TooSlowError as exc:
            return exc
        return None

    async def concurrently(self, *thunks: Thunk, stagger: float = 0.0) -> list[Any]:
        results: list[Any] = [None] * len(thunks)

        async def one(index: int, thunk: Thunk) -> None:
            try:
                results[index] = await thunk()
            except Exception as exc:
                results[index] = exc

        async with trio.open_nursery() as nursery:
            for index, thunk in enumerate(thunks):
                if index and stagger:
                    await trio.sleep(stagger)
                nursery.start_soon(one, index, thunk)
                await trio.sleep(0)
        return results

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)

    async def until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        for _ in range(int(timeout / 0.01)):
            if predicate():
                return
            await trio.sleep(0.01)
        raise AssertionError(f"condition not reached within {timeout} s")

    async def idle(self, server: FakeCoderServer, timeout: float = 5.0) -> bool:
        return await trio.to_thread.run_sync(server.wait_idle, timeout)


class SyncRuntime:
    """The blocking facade (``coder_io_sync``): every ``async`` method calls the blocking API
    and never suspends, so ``run`` drives the scenario with ``coro.send(None)`` and no event
    loop exists anywhere. ``concurrently`` runs thunks in threads (one agent per thread, or
    ``interrupt``/``archive`` from another thread, as the adapter documents). A caller's
    deadline is ``timeout=`` (the builtin ``TimeoutError``)."""

    name = "sync"
    adapter: Any = coder_io_sync
    #: What a caller's own deadline raises on this runtime (D22).
    deadline_error: type[BaseException] = TimeoutError
    #: The blocking adapter's own cancellation: Ctrl-C (D22).
    cancel_error: type[BaseException] = KeyboardInterrupt
    agent_class: Any = coder_io_sync.CoderAgent
    client_class: Any = coder_io_sync.CoderChatClient

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def run(self, scenario: Callable[[SyncRuntime], Coroutine[Any, Any, T]]) -> T:
        return _complete(scenario(self))

    def _observe(self, call: Callable[[], T]) -> T:
        try:
            value = call()
        except BaseException as exc:
            self.recorder.note(exc)
            raise
        self.recorder.note(value)
        return value

    # -- agents --------------------------------------------------------------------------------

    async def agent(self, server: FakeCoderServer, **kwargs: Any) -> coder_io_sync.CoderAgent:
        kwargs.setdefault("base_url", server.url)
        kwargs.setdefault("token", server.token)
        kwargs.setdefault("organization_id", server.organization_id)
        kwargs.setdefault("on_transport_event", self.recorder.event)
        kwargs.setdefault("settle_retry_delay", 0.05)
        try:
            agent = coder_io_sync.CoderAgent(**kwargs)
        except BaseException as exc:
            self.recorder.note(exc)
            raise
        self.recorder.note(agent)
        return agent

    async def client(self, server: FakeCoderServer, **kwargs: Any) -> coder_io_sync.CoderChatClient:
        kwargs.setdefault("on_transport_event", self.recorder.event)
        client = coder_io_sync.CoderChatClient(server.url, server.token, **kwargs)
        self.recorder.note(client)
        return client

    async def close_client(self, client: coder_io_sync.CoderChatClient) -> None:
        client.close()

    async def generate(
        self, agent: coder_io_sync.CoderAgent, prompt: Any = None, **kwargs: Any
    ) -> Any:
        return self._observe(lambda: agent.generate(prompt, **kwargs))

    async def stream(
        self, agent: coder_io_sync.CoderAgent, prompt: Any = None, **kwargs: Any
    ) -> Streamed:
        out = Streamed()
        try:
            with agent.stream(prompt, **kwargs) as stream:
                for part in stream:
                    self.recorder.note(part)
                    out.parts.append(part)
                out.result = self._observe(stream.get_final_result)
        except TimeoutError as exc:
            # The caller's own deadline (``timeout=``) is raised, as the runtimes' are.
            self.recorder.note(exc)
            raise
        except Exception as exc:
            self.recorder.note(exc)
            out.error = exc
        return out

    async def stream_text(
        self, agent: coder_io_sync.CoderAgent, prompt: Any = None
    ) -> tuple[list[str], Any]:
        with agent.stream(prompt) as stream:
            deltas = list(stream.text_stream)
            return deltas, self._observe(stream.get_final_result)

    async def stream_first(
        self, agent: coder_io_sync.CoderAgent, prompt: Any, count: int
    ) -> list[Any]:
        parts: list[Any] = []
        with agent.stream(prompt) as stream:
            for part in stream:
                parts.append(part)
                if len(parts) >= count:
                    break
        return parts

    async def generate_within(
        self, agent: coder_io_sync.CoderAgent, prompt: Any, seconds: float
    ) -> BaseException | None:
        try:
            agent.generate(prompt, timeout=seconds)
        except TimeoutError as exc:
            self.recorder.note(exc)
            return exc
        return None

    async def bounded(self, seconds: float, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self.<method>(*args, **kwargs)`` with the caller's deadline ``timeout=seconds``."""
        return await getattr(self, method)(*args, timeout=seconds, **kwargs)

    async def within(
        self, seconds: float, method: str, *args: Any, **kwargs: Any
    ) -> BaseException | None:
        """``self.<method>(*args, **kwargs)`` with the caller's deadline ``timeout=seconds``:
        the ``TimeoutError`` it raised, ``None`` when the call finished first."""
        try:
            await self.bounded(seconds, method, *args, **kwargs)
        except TimeoutError as exc:
            self.recorder.note(exc)
            return exc
        return None

    async def interrupt(self, agent: coder_io_sync.CoderAgent, **kwargs: Any) -> Any:
        return self._observe(lambda: agent.interrupt(**kwargs))

    async def archive(self, agent: coder_io_sync.CoderAgent, **kwargs: Any) -> Any:
        return self._observe(lambda: agent.archive(**kwargs))

    async def close(self, agent: coder_io_sync.CoderAgent, **kwargs: Any) -> None:
        agent.close(**kwargs)

    async def reset_session(self, agent: coder_io_sync.CoderAgent) -> None:
        agent.reset_session()

    async def attach(self, agent: coder_io_sync.CoderAgent, content: Any, **kwargs: Any) -> Any:
        return self._observe(lambda: agent.attach(content, **kwargs))

    async def list_models(self, agent: coder_io_sync.CoderAgent) -> Any:
        return self._observe(agent.list_models)

    async def history(self, agent: coder_io_sync.CoderAgent) -> Any:
        return self._observe(agent.history)

    async def get_chat_cost(self, agent: coder_io_sync.CoderAgent) -> Any:
        return self._observe(agent.get_chat_cost)

    async def upload_to_workspace(
        self, agent: coder_io_sync.CoderAgent, content: Any, path: str
    ) -> Any:
        return self._observe(lambda: agent.upload_to_workspace(content, path))

    async def client_call(
        self, agent: coder_io_sync.CoderAgent, name: str, *args: Any, **kwargs: Any
    ) -> Any:
        return self._observe(lambda: getattr(agent.client, name)(*args, **kwargs))

    # -- raw clients and watches -------------------------------------------------------------

    async def call(self, client: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._observe(lambda: getattr(client, name)(*args, **kwargs))

    def http_client(
        self, *, on_request: Callable[[httpx.Request], None] | None = None, **kwargs: Any
    ) -> Any:
        if on_request is not None:
            kwargs["event_hooks"] = {"request": [on_request]}
        return httpx.Client(**kwargs)

    async def close_http(self, http: Any) -> None:
        http.close()

    async def enter(self, watch: Any) -> Any:
        return watch.__enter__()

    async def leave(self, watch: Any) -> None:
        watch.__exit__(None, None, None)

    async def events_until(self, watch: Any, done: Callable[[list[Any]], bool]) -> list[Any]:
        got: list[Any] = []
        for event in watch:
            got.append(event)
            if done(got):
                return got
        raise AssertionError("the watch ended")

    async def drain(self, watch: Any) -> list[Any]:
        return list(watch)

    async def next_event(self, watch: Any) -> Any:
        # A StopIteration cannot leave a coroutine (PEP 479): the end is StopAsyncIteration here.
        try:
            return next(watch)
        except StopIteration:
            raise StopAsyncIteration from None

    async def first_event(self, watch: Any) -> Any:
        for event in watch:
            return event
        raise AssertionError("the watch ended")

    async def cancel_consumer(self, watch: Any, when: Callable[[], bool]) -> bool:
        """The blocking adapter's own cancellation is Ctrl-C: SIGINT to the main thread (the
        consumer) once ``when()`` holds; whether the ``KeyboardInterrupt`` propagated."""
        try:
            with _ctrl_c_when(when):
                for _ in watch:
                    pass
        except KeyboardInterrupt:
            return True
        return False

    async def durable(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._observe(lambda: getattr(self.adapter, name)(*args, **kwargs))

    async def cancel_when(
        self, when: Callable[[], bool], method: str, *args: Any, **kwargs: Any
    ) -> BaseException | None:
        """Ctrl-C (SIGINT to the main thread, which makes the call) as soon as ``when()``
        holds: the ``KeyboardInterrupt`` that propagated, ``None`` when the call finished
        first."""
        try:
            with _ctrl_c_when(when):
                _complete(getattr(self, method)(*args, **kwargs))
        except KeyboardInterrupt as exc:
            self.recorder.note(exc)
            return exc
        return None

    async def cancelled_after(self, seconds: float, method: str, *args: Any, **kwargs: Any) -> bool:
        """The blocking adapter's own cancellation is Ctrl-C: SIGINT to the main thread
        after ``seconds``; whether the ``KeyboardInterrupt`` propagated."""
        main = threading.main_thread()
        assert threading.current_thread() is main, "Ctrl-C reaches the main thread only"
        ident = main.ident
        assert ident is not None
        killer = threading.Timer(seconds, lambda: signal.pthread_kill(ident, signal.SIGINT))
        killer.start()
        try:
            _complete(getattr(self, method)(*args, **kwargs))
        except KeyboardInterrupt:
            return True
        finally:
            killer.cancel()
            killer.join()
        return False

    async def close_from_another_thread(self, watch: Any, when: Callable[[], bool]) -> list[Any]:
        """Consume ``watch`` in this thread while another thread calls ``watch.close()`` once
        ``when()`` holds (the blocking watch has no caller deadline; ``close`` from another
        thread is how a program stops it, besides Ctrl-C): the events the iteration yielded
        before it ended."""
        stop = threading.Event()

        def closer() -> None:
            while not stop.is_set():
                if when():
                    watch.close()
                    return
                time.sleep(0.01)

        thread = threading.Thread(target=closer, daemon=True)
        thread.start()
        try:
            return list(watch)
        finally:
            stop.set()
            thread.join()

    # -- control -------------------------------------------------------------------------------

    async def concurrently(self, *thunks: Thunk, stagger: float = 0.0) -> list[Any]:
        """Each thunk in a thread of its own, started ``stagger`` seconds apart; the values or
        the exceptions, in order."""
        results: list[Any] = [None] * len(thunks)

        def body(index: int, thunk: Thunk) -> None:
            try:
                results[index] = _complete(thunk())  # type: ignore[arg-type]
            except BaseException as exc:
                results[index] = exc

        threads: list[threading.Thread] = []
        for index, thunk in enumerate(thunks):
            if index and stagger:
                time.sleep(stagger)
            thread = threading.Thread(target=body, args=(index, thunk), daemon=True)
            threads.append(thread)
            thread.start()
        for thread in threads:
            thread.join(60.0)
            assert not thread.is_alive(), "a concurrent call never finished"
        return results

    async def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        for _ in range(int(timeout / 0.01)):
            if predicate():
                return
            time.sleep(0.01)
        raise AssertionError(f"condition not reached within {timeout} s")

    async def idle(self, server: FakeCoderServer, timeout: float = 5.0) -> bool:
        return server.wait_idle(timeout)


#: The runtimes the scenarios run on.
RUNTIMES: dict[str, Callable[[Recorder], Any]] = {
    "asyncio": AsyncioRuntime,
    "sync": SyncRuntime,
    "trio": TrioRuntime,
}
#: The event-loop runtimes: what only they offer (a caller's deadline around a watch).
LOOP_RUNTIMES = ("asyncio", "trio")
