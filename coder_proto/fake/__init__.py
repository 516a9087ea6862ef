"""A faithful fake of Coder's chat server ("chatd"), as a pure model.

``FakeCoderModel`` reproduces the server's REST surface, lifecycle state machine and stream
semantics (server-behaviour 1-8) without any I/O: an adapter
(``coder_io_asyncio.fake_server.FakeCoderServer``) serves it over loopback HTTP and
WebSocket. Scripts (``Script``, ``Say``, ``CallClientTool`` ...) decide what the simulated
model does with each prompt; ``Faults`` injects failures deterministically.

Driving the pure model directly (time is an argument; nothing runs by itself)::

    model = FakeCoderModel(FakeConfig(chunk_delay=0.01))
    headers = {"Coder-Session-Token": model.token}
    body = b'{"organization_id": "%s", "content": [{"type": "text", "text": "hi"}]}'
    chat = model.handle_http("POST", "/api/v2/chats", headers,
                             body % model.organization_id.encode(), now=0.0).json()
    sub = model.handle_upgrade(f"/api/v2/chats/{chat['id']}/stream", headers, now=0.0)
    frames = sub.pull(now=0.5)          # JSON arrays of events, each ending in a newline
    model.next_deadline()               # when the next worker or timer event is due
"""

from .config import DEFAULT_MODELS, FakeConfig, FakeCounters, Faults, RequestRecord
from .http import FakeApiError, FakeHttpResponse
from .model import (
    CANCEL_BY_EDIT,
    CANCEL_BY_PROMOTION,
    CANCEL_BY_TIMEOUT,
    CANCEL_BY_USER,
    CANCEL_BY_USER_MESSAGE,
    FakeCoderModel,
)
from .script import (
    CallClientTool,
    CallServerTool,
    Cite,
    Fail,
    Retry,
    Say,
    Script,
    ScriptBook,
    ScriptContext,
    ScriptError,
    ScriptRule,
    Think,
    Usage,
    Wait,
    default_script,
)
from .state import FakeChat, FakeFile, FakeMessage, FakeModelSpec, FakeQueuedMessage
from .stream import StreamSubscription, WatchSubscription

__all__ = [
    "CANCEL_BY_EDIT",
    "CANCEL_BY_PROMOTION",
    "CANCEL_BY_TIMEOUT",
    "CANCEL_BY_USER",
    "CANCEL_BY_USER_MESSAGE",
    "DEFAULT_MODELS",
    "CallClientTool",
    "CallServerTool",
    "Cite",
    "Fail",
    "FakeApiError",
    "FakeChat",
    "FakeCoderModel",
    "FakeConfig",
    "FakeCounters",
    "FakeFile",
    "FakeHttpResponse",
    "FakeMessage",
    "FakeModelSpec",
    "FakeQueuedMessage",
    "Faults",
    "RequestRecord",
    "Retry",
    "Say",
    "Script",
    "ScriptBook",
    "ScriptContext",
    "ScriptError",
    "ScriptRule",
    "StreamSubscription",
    "Think",
    "Usage",
    "Wait",
    "WatchSubscription",
    "default_script",
]
