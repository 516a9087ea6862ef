"""coder_io_sync: the blocking adapter of the Coder Agents client.

The same public names as ``coder_io_asyncio``, as plain blocking calls::

    from coder_io_sync import CoderAgent, tool

    @tool
    def get_weather(city: str) -> dict:
        \"\"\"Get the weather for a city.\"\"\"
        return {"city": city, "temp_c": 21}

    with CoderAgent(tools=[get_weather]) as agent:   # CODER_URL / CODER_SESSION_TOKEN
        result = agent.generate("Weather in Paris?", timeout=300)
        with agent.stream("Write a haiku.") as stream:
            for delta in stream.text_stream:
                print(delta, end="")

No event loop runs anywhere, in the caller's thread or behind it: the calling thread performs
the I/O (blocking sockets with timeouts, ``httpx.Client``), client tools run in threads of
their own while the stream keeps being read, and fire-and-forget cleanup (interrupts and
withdrawals, D22) runs in a worker thread owned by the client, joined when it closes.

Cancellation: ``generate(..., timeout=...)`` / ``stream(..., timeout=...)`` are a caller's
deadline (the builtin ``TimeoutError``); ``KeyboardInterrupt`` while a call waits cancels the
turn the same way and propagates; either interrupts the run on the server once, in the
background. Only ``request_timeout`` raises ``CoderChatError(kind="timeout")``.

Threads (what is and is not thread-safe):

* use one agent per thread: ``generate`` / ``stream`` are single-flight per agent (a second
  concurrent call raises ``CoderAgentError``); a stream is consumed by one thread;
* ``agent.interrupt()`` from another thread is the supported way to stop a running
  ``generate`` or stream (the turn then settles and returns); ``archive()`` and the plain
  operations may be called from other threads too;
* a ``CoderChatClient`` may be shared across threads when its ``httpx.Client`` may be (the
  one it creates is): each thread performs its own requests;
* transport-event callbacks run with the client's driver locked and must not call back into
  the same client or agent; ``close()`` must not race other calls on the same object.
"""

from typing import TYPE_CHECKING

from coder_io_common.stores import STORE_NAMES
from coder_proto.adapter import RUNTIME_NAMES, USER_NAMES, lazy_exports

if TYPE_CHECKING:
    from coder_io_common.instrumentation import instrument as instrument
    from coder_io_common.stores import SQLiteStore as SQLiteStore
    from coder_proto import *  # noqa: F403

    from .agent import AgentStream as AgentStream
    from .agent import CoderAgent as CoderAgent
    from .client import CoderChatClient as CoderChatClient
    from .client import watch_chats as watch_chats
    from .durable import archive_workflow as archive_workflow
    from .durable import bind_tools as bind_tools
    from .durable import run_turn as run_turn
    from .durable import sweep_orphans as sweep_orphans
    from .watch import ChatWatch as ChatWatch

__all__ = [*USER_NAMES, *RUNTIME_NAMES, *STORE_NAMES]

# Every name is imported on first use: importing the package costs no protocol code until a
# name of it is used.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "coder_proto": USER_NAMES,
        "coder_io_common.instrumentation": ("instrument",),
        "coder_io_common.stores": ("SQLiteStore",),
        ".agent": ("AgentStream", "CoderAgent"),
        ".client": ("CoderChatClient", "watch_chats"),
        ".durable": ("archive_workflow", "bind_tools", "run_turn", "sweep_orphans"),
        ".watch": ("ChatWatch",),
    },
)
