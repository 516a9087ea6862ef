"""coder_proto: the sans-I/O core of the Coder Agents client.

Everything the Coder chat protocol needs, as pure state machines that take bytes, HTTP
responses, tool results and the current time, and return actions. No sockets, no event loop,
no clock: any runtime can drive it (``coder_io_asyncio``, ``coder_io_trio``, ``coder_io_sync``,
or your own loop).
"""

from ._options import AgentOptions
from .errors import (
    CoderAgentError,
    CoderApiError,
    CoderChatError,
    CoderNetworkError,
    CoderProtocolError,
    CoderStreamError,
)

__version__ = "0.1.0"

__all__ = [
    "AgentOptions",
    "CoderAgentError",
    "CoderApiError",
    "CoderChatError",
    "CoderNetworkError",
    "CoderProtocolError",
    "CoderStreamError",
    "__version__",
]
