"""A faithful fake of Coder's chat server ("chatd"), as a pure model.

``FakeCoderModel`` reproduces the server's REST surface, lifecycle state machine and stream
semantics (server-behaviour sections 1-8) without any I/O; ``FakeCoderServer``
(``coder_integrations.fake_server``) serves it over loopback HTTP and WebSocket. Scripts
(``Script``, ``Say``, ``CallClientTool`` ...) chosen by a ``ScriptBook`` decide what the
simulated model does with each prompt; ``Faults`` injects failures deterministically;
``FakeCounters`` records what the server saw.

Driving the pure model directly (time is an argument; nothing runs by itself)::

    model = FakeCoderModel(FakeConfig(chunk_delay=0.01))
    headers = {"Coder-Session-Token": model.token}
    body = b'{"organization_id": "%s", "content": [{"type": "text", "text": "hi"}]}'
    chat = model.handle_http("POST", "/api/v2/chats", headers,
                             body % model.organization_id.encode(), now=0.0).json()
    sub = model.handle_upgrade(f"/api/v2/chats/{chat['id']}/stream", headers, now=0.0)
    frames = sub.pull(now=0.5)          # JSON arrays of events, each ending in a newline
    model.next_deadline()               # when the next worker or timer event is due

Everything a user needs is exported here; the underscore modules are the implementation.
"""

from ._book import ScriptBook, ScriptRule
from ._catalog import models_from_json
from ._config import DEFAULT_MODELS, FakeConfig
from ._context import PromptFile, ScriptContext, ScriptFactory
from ._counters import FakeCounters, RequestRecord
from ._default_script import default_script
from ._errors import FakeApiError, FakeConfigError, ScriptError
from ._faults import (
    Faults,
    FrameDelay,
    FrameStall,
    RequestDelay,
    RequestFailure,
    RunStall,
    SnapshotFailure,
    StreamDrop,
    UpgradeRejection,
)
from ._http import FakeHttpResponse
from ._model import MAX_REQUEST_BODY_BYTES, FakeCoderModel
from ._routes import OPERATIONS
from ._rows import FakeChat, FakeFile, FakeMessage, FakeModelSpec, FakeQueuedMessage
from ._script import (
    CallClientTool,
    CallServerTool,
    Cite,
    Fail,
    ReportUsage,
    Retry,
    Say,
    Script,
    ScriptItem,
    Think,
    Wait,
)
from ._store import (
    CANCEL_BY_EDIT,
    CANCEL_BY_PROMOTION,
    CANCEL_BY_TIMEOUT,
    CANCEL_BY_USER,
    CANCEL_BY_USER_MESSAGE,
)
from ._stream import StreamSubscription
from ._watch import WatchSubscription

__all__ = [
    "CANCEL_BY_EDIT",
    "CANCEL_BY_PROMOTION",
    "CANCEL_BY_TIMEOUT",
    "CANCEL_BY_USER",
    "CANCEL_BY_USER_MESSAGE",
    "DEFAULT_MODELS",
    "MAX_REQUEST_BODY_BYTES",
    "OPERATIONS",
    "CallClientTool",
    "CallServerTool",
    "Cite",
    "Fail",
    "FakeApiError",
    "FakeChat",
    "FakeCoderModel",
    "FakeConfig",
    "FakeConfigError",
    "FakeCounters",
    "FakeFile",
    "FakeHttpResponse",
    "FakeMessage",
    "FakeModelSpec",
    "FakeQueuedMessage",
    "Faults",
    "FrameDelay",
    "FrameStall",
    "PromptFile",
    "ReportUsage",
    "RequestDelay",
    "RequestFailure",
    "RequestRecord",
    "Retry",
    "RunStall",
    "Say",
    "Script",
    "ScriptBook",
    "ScriptContext",
    "ScriptError",
    "ScriptFactory",
    "ScriptItem",
    "ScriptRule",
    "SnapshotFailure",
    "StreamDrop",
    "StreamSubscription",
    "Think",
    "UpgradeRejection",
    "Wait",
    "WatchSubscription",
    "default_script",
    "models_from_json",
]
