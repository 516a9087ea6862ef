"""coder_io_asyncio: the asyncio adapter of the Coder Agents client."""

from .client import CoderChatClient
from .watch import ChatWatch, watch_chats

__all__ = ["ChatWatch", "CoderChatClient", "watch_chats"]
